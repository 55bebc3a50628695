#include "tokenize/tokenize_breaker.h"

#include <algorithm>

namespace prefixgate::tokenize {

std::string_view breakerFailureLabel(BreakerFailure why) {
  switch (why) {
    case BreakerFailure::kTimeout: return "timeout";
    case BreakerFailure::kConnection: return "connection";
    case BreakerFailure::kSlow: return "slow";
    case BreakerFailure::kCount: break;
  }
  return "timeout";
}

std::optional<TokenizeBreakers::Ticket> TokenizeBreakers::acquire(uint32_t pod, int64_t now_ms) {
  std::lock_guard lock(mutex_);
  auto it = breakers_.find(pod);
  if (it == breakers_.end()) return Ticket{pod, 0, false};
  Breaker& b = it->second;
  if (now_ms < b.open_until_ms) return std::nullopt;
  // A probe reports within its call's timeout; one that never did (a bug) must not hold the pod out for good.
  if (b.probing && now_ms - b.probe_since_ms < options_.max_backoff_ms) return std::nullopt;
  b.probing = true;
  b.probe_since_ms = now_ms;
  b.epoch = next_epoch_++;  // each probe its own: an abandoned one's late report is stale
  return Ticket{pod, b.epoch, true};
}

void TokenizeBreakers::succeeded(const Ticket& ticket) {
  std::lock_guard lock(mutex_);
  auto it = breakers_.find(ticket.pod);
  if (it != breakers_.end() && ticket.probe && ticket.epoch == it->second.epoch) breakers_.erase(it);
}

bool TokenizeBreakers::failed(const Ticket& ticket, BreakerFailure why, int64_t now_ms) {
  std::lock_guard lock(mutex_);
  auto it = breakers_.find(ticket.pod);
  if (it == breakers_.end()) {
    if (ticket.epoch != 0) return false;  // its breaker closed since (a later probe answered)
    open(breakers_[ticket.pod], why, options_.backoff_ms, now_ms);
    return true;
  }
  Breaker& b = it->second;
  if (!ticket.probe || ticket.epoch != b.epoch) return false;  // already open: one failure opened it
  open(b, why, std::min(b.backoff_ms * 2, options_.max_backoff_ms), now_ms);
  return true;
}

void TokenizeBreakers::open(Breaker& b, BreakerFailure why, int64_t backoff_ms, int64_t now_ms) {
  b.epoch = next_epoch_++;
  b.backoff_ms = std::max<int64_t>(1, backoff_ms);
  b.open_until_ms = now_ms + b.backoff_ms;
  b.failures += 1;
  b.last = why;
  b.probing = false;
  opens_[static_cast<size_t>(why)].fetch_add(1, std::memory_order_relaxed);
}

void TokenizeBreakers::abandoned(const Ticket& ticket) {
  std::lock_guard lock(mutex_);
  auto it = breakers_.find(ticket.pod);
  if (it != breakers_.end() && ticket.probe && ticket.epoch == it->second.epoch) it->second.probing = false;
}

void TokenizeBreakers::forget(uint32_t pod) {
  std::lock_guard lock(mutex_);
  breakers_.erase(pod);
}

TokenizeBreakers::View TokenizeBreakers::view(uint32_t pod, int64_t now_ms) const {
  std::lock_guard lock(mutex_);
  auto it = breakers_.find(pod);
  if (it == breakers_.end()) return {};
  const Breaker& b = it->second;
  View out;
  out.state = now_ms < b.open_until_ms ? State::kOpen : State::kHalfOpen;
  out.retry_in_ms = std::max<int64_t>(0, b.open_until_ms - now_ms);
  out.failures = b.failures;
  out.last = b.last;
  return out;
}

size_t TokenizeBreakers::size() const {
  std::lock_guard lock(mutex_);
  return breakers_.size();
}

}  // namespace prefixgate::tokenize
