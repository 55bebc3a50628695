#pragma once
// A clock that moves only when a test says so, so expiry is tested without sleeping.
#include <atomic>
#include <chrono>

#include "prefixgate/types.h"

namespace prefixgate::index::testing {

class ManualClock final : public Clock {
 public:
  SteadyTime now() const override { return SteadyTime(std::chrono::nanoseconds(ns_.load())); }
  void advance(std::chrono::nanoseconds by) { ns_ += by.count(); }

 private:
  std::atomic<int64_t> ns_{int64_t{1'000'000'000} * 3600};  // an arbitrary non-zero start
};

}  // namespace prefixgate::index::testing
