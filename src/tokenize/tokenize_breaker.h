#pragma once
// Per-pod circuit breakers for the remote tokenizer's calls (RemoteTokenizer). A pod whose /tokenize timed out, could
// not be reached, or answered so slowly that another pod asked later (a hedge) answered first, is skipped for a
// backoff period; then one call probes it (half-open): an answer closes the breaker, another failure opens it again
// for twice as long, up to a maximum. An error status or a bad answer counts as an answer: the pod is reachable and
// quick, and such an answer comes from the request, which would get it from every pod. Pure: time is passed in
// (milliseconds of a steady clock). Thread-safe: one object serves every event-loop thread.
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

namespace prefixgate::tokenize {

enum class BreakerFailure {
  kTimeout,     // no answer within the call's timeout
  kConnection,  // could not connect, or the connection failed before an answer
  kSlow,        // still no answer when a hedge sent to another pod later answered
  kCount,
};
// "timeout", "connection", "slow" (metric labels).
std::string_view breakerFailureLabel(BreakerFailure why);

struct BreakerOptions {
  int64_t backoff_ms = 1000;       // routing.prefix_cache.remote_tokenizer_breaker_backoff_ms: after a first failure
  int64_t max_backoff_ms = 30000;  // routing.prefix_cache.remote_tokenizer_breaker_max_backoff_ms
};

class TokenizeBreakers {
 public:
  // A permission to ask a pod. Its report counts only while the pod's breaker is as it was when the ticket was
  // taken: a call begun before the breaker opened (or while another call probed) reports into the void.
  struct Ticket {
    uint32_t pod = 0;
    uint64_t epoch = 0;  // the breaker's, 0 while it was closed
    bool probe = false;  // this call is the half-open breaker's one probe
  };
  enum class State { kClosed, kOpen, kHalfOpen };
  struct View {
    State state = State::kClosed;
    int64_t retry_in_ms = 0;  // open: until its next probe may go
    uint32_t failures = 0;    // failures in a row (each one opened it)
    BreakerFailure last = BreakerFailure::kTimeout;  // the latest of them (when failures > 0)
  };

  explicit TokenizeBreakers(BreakerOptions options) : options_(options) {}

  // Whether `pod` may be asked now: yes while its breaker is closed; no while it is open; once its backoff has
  // passed (half-open), yes to the first caller, which is then its probe, and no to others until the probe reports.
  std::optional<Ticket> acquire(uint32_t pod, int64_t now_ms);
  // The pod answered (an error status or a bad answer included): a probe closes its breaker.
  void succeeded(const Ticket& ticket);
  // The pod failed: a closed breaker opens for backoff_ms, a probe's reopens for twice its last backoff (at most
  // max_backoff_ms). Returns whether this report opened it (counted in opens()); stale reports change nothing.
  bool failed(const Ticket& ticket, BreakerFailure why, int64_t now_ms);
  // The call stopped waiting for the pod without a verdict (another pod's answer came first): a probe's turn passes
  // to the next caller.
  void abandoned(const Ticket& ticket);
  // The pod left the fleet (its id is never reused): its breaker is dropped.
  void forget(uint32_t pod);

  View view(uint32_t pod, int64_t now_ms) const;
  // Times a breaker opened (or reopened after its probe failed), by the failure that opened it.
  uint64_t opens(BreakerFailure why) const { return opens_[static_cast<size_t>(why)].load(std::memory_order_relaxed); }
  // Breakers not closed (open or half-open).
  size_t size() const;

 private:
  struct Breaker {
    uint64_t epoch = 0;
    int64_t open_until_ms = 0;
    int64_t backoff_ms = 0;
    uint32_t failures = 0;
    BreakerFailure last = BreakerFailure::kTimeout;
    bool probing = false;
    int64_t probe_since_ms = 0;
  };
  void open(Breaker& b, BreakerFailure why, int64_t backoff_ms, int64_t now_ms);

  const BreakerOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<uint32_t, Breaker> breakers_;  // the pods whose breaker is not closed
  uint64_t next_epoch_ = 1;
  std::array<std::atomic<uint64_t>, static_cast<size_t>(BreakerFailure::kCount)> opens_{};
};

}  // namespace prefixgate::tokenize
