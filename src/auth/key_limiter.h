#pragma once
// Per-key rate limits (requests_per_minute, tokens_per_minute) as token buckets: each bucket holds up to a
// minute's allowance and refills continuously at allowance / 60 s, so a key may burst its whole minute and then
// proceeds at the steady rate. A request is admitted while both buckets are above zero; it takes one request at
// admission and its tokens (prompt + completion, known only when the response ends) are charged afterwards, which
// may drive the token bucket below zero: the key then waits until it has refilled. Pure (the time is passed in)
// and thread-safe: a small mutex per key, held for a few arithmetic steps.
#include <cstdint>
#include <mutex>
#include <optional>

namespace prefixgate::auth {

enum class LimitKind { kNone, kRequests, kTokens };

struct Admission {
  bool admitted = true;
  LimitKind limit = LimitKind::kNone;  // which limit refused it
  uint32_t retry_after_s = 0;          // whole seconds until that limit admits a request again (at least 1)
};

// The tokens a finished request is charged. The engine's usage when its response reported the prompt's tokens
// (`reported_prompt_tokens`: usage.prompt_tokens or llama.cpp's timings) plus the output tokens the relay counted.
// Otherwise the gateway's own count of the prompt (`counted_prompt_tokens`, < 0 = none) takes its place, when the
// engine took the request on (`engine_took_it`: it answered 2xx, or the client left after the request was sent):
// a stream without stream_options.include_usage carries no usage, and must not pass the limit for free.
uint64_t chargedTokens(std::optional<uint64_t> reported_prompt_tokens, uint64_t output_tokens,
                       int64_t counted_prompt_tokens, bool engine_took_it);

class KeyLimiter {
 public:
  KeyLimiter(std::optional<uint64_t> requests_per_minute, std::optional<uint64_t> tokens_per_minute, int64_t now_ms);

  // Admits one request at `now_ms` (taking it from the request bucket) or says which limit refused it.
  Admission admit(int64_t now_ms);
  // Charges a finished request's tokens.
  void charge(uint64_t tokens, int64_t now_ms);
  // New limits (a reload): the levels are kept, capped at the new allowances.
  void setLimits(std::optional<uint64_t> requests_per_minute, std::optional<uint64_t> tokens_per_minute, int64_t now_ms);

 private:
  struct Bucket {
    std::optional<uint64_t> per_minute;  // unset = unlimited
    double level = 0;
    void refill(int64_t elapsed_ms);
    // Whole seconds (at least 1) until the level reaches `needed` (or exceeds it, with `strictly_above`).
    uint32_t secondsUntil(double needed, bool strictly_above) const;
  };
  void refill(int64_t now_ms);
  std::mutex mutex_;
  Bucket requests_;
  Bucket tokens_;
  int64_t last_ms_;
};

}  // namespace prefixgate::auth
