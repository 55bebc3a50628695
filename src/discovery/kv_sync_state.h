#pragma once
// What KV event sync knows about one pod, beyond the blocks in the index: when its publisher last spoke and when
// the pod last finished a request, from which routing decides whether to trust its (possibly empty) event view.
// Lock-free: the subscriber thread and the relays write, request threads read.
#include <atomic>
#include <cstdint>

namespace prefixgate::discovery {

class KvSyncState {
 public:
  // The subscriber's thread: a message from the pod's publisher was applied at now_ms (steady clock).
  void noteEvent(int64_t now_ms) {
    last_event_ms_.store(now_ms, std::memory_order_relaxed);
    events_.fetch_add(1, std::memory_order_relaxed);
  }
  // The subscriber's thread: the subscription started (the silence clock starts here too).
  void noteSubscribed(int64_t now_ms) {
    subscribed_.store(true, std::memory_order_relaxed);
    int64_t none = -1;
    last_event_ms_.compare_exchange_strong(none, now_ms, std::memory_order_relaxed);
  }
  // A relay: a request to the pod completed at now_ms. (A completed prompt of a block or more makes its engine
  // publish a BlockStored.)
  void noteCompleted(int64_t now_ms) { last_completed_ms_.store(now_ms, std::memory_order_relaxed); }

  bool subscribed() const { return subscribed_.load(std::memory_order_relaxed); }
  // Silent: the pod kept completing requests for more than silent_ms after its publisher last spoke (or after
  // the subscription started, when it never did). A pod without a subscription is not silent: it has no view.
  bool silent(int64_t silent_ms) const {
    if (!subscribed()) return false;
    const int64_t spoke = last_event_ms_.load(std::memory_order_relaxed);
    return last_completed_ms_.load(std::memory_order_relaxed) - spoke > silent_ms;
  }
  int64_t lastEventMs() const { return last_event_ms_.load(std::memory_order_relaxed); }
  uint64_t events() const { return events_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> subscribed_{false};
  std::atomic<int64_t> last_event_ms_{-1};
  std::atomic<int64_t> last_completed_ms_{-1};
  std::atomic<uint64_t> events_{0};
};

}  // namespace prefixgate::discovery
