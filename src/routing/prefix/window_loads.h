#pragma once
// The work routed to each pod over a sliding window (prefix-cache-preble's window load, and the wait scorer's
// balance of new work): per pod a ring of kBuckets sums of window / kBuckets each, under one mutex (taken once to
// read a decision's candidates and once to add its pick). Bounded: beyond kPrunedAbove pods, those idle for a whole
// window (pods that left the set) are dropped.
#include <array>
#include <cstdint>
#include <mutex>
#include <span>
#include <unordered_map>

#include "prefixgate/strategy.h"

namespace prefixgate::routing {

class WindowLoads {
 public:
  static constexpr size_t kBuckets = 60;
  explicit WindowLoads(uint32_t window_ms) : bucket_ms_(static_cast<int64_t>(window_ms) / kBuckets) {}
  // Each candidate's work routed over the window ending at now_ms (steady clock) into `out`.
  void read(std::span<const Candidate> candidates, int64_t now_ms, std::span<double> out) const;
  void add(PodId pod, double cost, int64_t now_ms);

 private:
  static constexpr size_t kPrunedAbove = 4096;
  class Ring {
   public:
    void add(int64_t now_ms, int64_t bucket_ms, double cost);
    double sum(int64_t now_ms, int64_t bucket_ms) const;
    int64_t newestEpoch() const;

   private:
    struct Bucket {
      int64_t epoch = INT64_MIN;
      double cost = 0;
    };
    std::array<Bucket, kBuckets> buckets_;
    // The window's sum as of epoch sum_epoch_ (kept up to date by add within that epoch): a read sums the buckets
    // once per bucket period, not per decision.
    mutable double sum_ = 0;
    mutable int64_t sum_epoch_ = INT64_MIN;
  };
  const int64_t bucket_ms_;
  mutable std::mutex mutex_;
  std::unordered_map<PodId, Ring> rings_;  // guarded by mutex_
};

}  // namespace prefixgate::routing
