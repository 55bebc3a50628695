#include "auth/key_limiter.h"

#include <algorithm>
#include <cmath>

namespace prefixgate::auth {
namespace {
constexpr double kWindowMs = 60000;  // the allowances are per minute
}

uint64_t chargedTokens(std::optional<uint64_t> reported_prompt_tokens, uint64_t output_tokens,
                       int64_t counted_prompt_tokens, bool engine_took_it) {
  uint64_t prompt = 0;
  if (reported_prompt_tokens) prompt = *reported_prompt_tokens;
  else if (engine_took_it && counted_prompt_tokens > 0) prompt = static_cast<uint64_t>(counted_prompt_tokens);
  uint64_t total = 0;
  // Both come from engine bytes: a bogus usage near 2^64 saturates instead of wrapping to a small charge.
  if (__builtin_add_overflow(prompt, output_tokens, &total)) total = UINT64_MAX;
  return total;
}

void KeyLimiter::Bucket::refill(int64_t elapsed_ms) {
  if (!per_minute) return;
  const double cap = static_cast<double>(*per_minute);
  level = std::min(cap, level + cap * static_cast<double>(elapsed_ms) / kWindowMs);
}

uint32_t KeyLimiter::Bucket::secondsUntil(double needed, bool strictly_above) const {
  const double rate_per_s = static_cast<double>(*per_minute) / (kWindowMs / 1000);
  const double exact = (needed - level) / rate_per_s;
  // At `exact` seconds the level equals `needed`: enough for ">=", one whole second more for ">".
  const double seconds = strictly_above ? std::floor(exact) + 1 : std::ceil(exact);
  return static_cast<uint32_t>(std::clamp(seconds, 1.0, 4294967295.0));
}

KeyLimiter::KeyLimiter(std::optional<uint64_t> requests_per_minute, std::optional<uint64_t> tokens_per_minute,
                       int64_t now_ms)
    : last_ms_(now_ms) {
  requests_.per_minute = requests_per_minute;
  requests_.level = requests_per_minute ? static_cast<double>(*requests_per_minute) : 0;
  tokens_.per_minute = tokens_per_minute;
  tokens_.level = tokens_per_minute ? static_cast<double>(*tokens_per_minute) : 0;
}

void KeyLimiter::refill(int64_t now_ms) {
  const int64_t elapsed = std::max<int64_t>(0, now_ms - last_ms_);  // a clock that steps back refills nothing
  requests_.refill(elapsed);
  tokens_.refill(elapsed);
  last_ms_ = std::max(last_ms_, now_ms);
}

Admission KeyLimiter::admit(int64_t now_ms) {
  std::lock_guard lock(mutex_);
  refill(now_ms);
  if (requests_.per_minute && requests_.level < 1)
    return {false, LimitKind::kRequests, requests_.secondsUntil(1, false)};
  // Tokens are charged after the fact: any allowance left (a level above 0) admits the request.
  if (tokens_.per_minute && tokens_.level <= 0)
    return {false, LimitKind::kTokens, tokens_.secondsUntil(0, true)};
  if (requests_.per_minute) requests_.level -= 1;
  return {};
}

void KeyLimiter::charge(uint64_t tokens, int64_t now_ms) {
  std::lock_guard lock(mutex_);
  refill(now_ms);
  if (tokens_.per_minute) tokens_.level -= static_cast<double>(tokens);
}

void KeyLimiter::setLimits(std::optional<uint64_t> requests_per_minute, std::optional<uint64_t> tokens_per_minute,
                           int64_t now_ms) {
  std::lock_guard lock(mutex_);
  refill(now_ms);
  // A limit that appears starts full; one that shrinks keeps what is left, up to the new allowance.
  auto update = [](Bucket& b, std::optional<uint64_t> limit) {
    if (!limit) {
      b = Bucket{};
      return;
    }
    const double cap = static_cast<double>(*limit);
    b.level = b.per_minute ? std::min(b.level, cap) : cap;
    b.per_minute = limit;
  };
  update(requests_, requests_per_minute);
  update(tokens_, tokens_per_minute);
}

}  // namespace prefixgate::auth
