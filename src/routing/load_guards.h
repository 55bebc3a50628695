#pragma once
// Guards that count a request against a pod's signals (routing/pod_signals.h) for as long as they live. They hold
// the pod itself (a discovery::PodPtr), so the release lands on the signals that were counted even after the pod
// left the set.
#include <cstdint>
#include <utility>

#include "discovery/pod_set.h"
#include "routing/pod_signals.h"

namespace prefixgate::routing {

// Counts a request against a pod (Add on construction, Release with the same tokens when reset or destroyed,
// whatever happened); movable, not copyable.
template <void (PodSignals::*Add)(int64_t), void (PodSignals::*Release)(int64_t)>
class PodCountGuard {
 public:
  PodCountGuard() = default;
  explicit PodCountGuard(discovery::PodPtr pod, int64_t tokens = 0) : pod_(std::move(pod)), tokens_(tokens) {
    if (pod_) (pod_->signals().*Add)(tokens_);
  }
  // Adopts a count already taken (PodSignals::tryAddInFlight): releases it, with `tokens`, at its end.
  struct Counted {};
  static constexpr Counted kCounted{};
  PodCountGuard(discovery::PodPtr pod, int64_t tokens, Counted) : pod_(std::move(pod)), tokens_(tokens) {}
  PodCountGuard(PodCountGuard&& o) noexcept : pod_(std::move(o.pod_)), tokens_(o.tokens_) {}
  PodCountGuard& operator=(PodCountGuard&& o) noexcept {
    if (this != &o) {
      reset();
      pod_ = std::move(o.pod_);
      tokens_ = o.tokens_;
    }
    return *this;
  }
  ~PodCountGuard() { reset(); }
  void reset() {
    if (pod_) (pod_->signals().*Release)(tokens_);
    pod_.reset();
  }
  const discovery::PodPtr& pod() const { return pod_; }

 private:
  discovery::PodPtr pod_;  // keeps the pod, and so its signals, alive until the release
  int64_t tokens_ = 0;
};

// A request (and its prompt tokens) in flight to a pod, from the moment it is chosen until the guard dies.
using InFlightGuard = PodCountGuard<&PodSignals::addInFlight, &PodSignals::releaseInFlight>;
// A request's predicted prefill tokens queued on a pod, from the moment it is chosen until its first response body
// byte (the relay resets it then) or its end.
using PrefillGuard = PodCountGuard<&PodSignals::addPrefill, &PodSignals::releasePrefill>;

}  // namespace prefixgate::routing
