#include "routing/prefix/window_loads.h"

#include <algorithm>

namespace prefixgate::routing {

void WindowLoads::Ring::add(int64_t now_ms, int64_t bucket_ms, double cost) {
  const int64_t epoch = now_ms / bucket_ms;
  Bucket& b = buckets_[static_cast<size_t>(epoch % static_cast<int64_t>(kBuckets))];
  if (b.epoch != epoch) b = {epoch, 0};
  b.cost += cost;
  if (sum_epoch_ == epoch) sum_ += cost;
}

double WindowLoads::Ring::sum(int64_t now_ms, int64_t bucket_ms) const {
  const int64_t epoch = now_ms / bucket_ms;
  if (sum_epoch_ == epoch) return sum_;
  double total = 0;
  for (const Bucket& b : buckets_)
    if (b.epoch > epoch - static_cast<int64_t>(kBuckets) && b.epoch <= epoch) total += b.cost;
  sum_ = total;
  sum_epoch_ = epoch;
  return total;
}

int64_t WindowLoads::Ring::newestEpoch() const {
  int64_t newest = INT64_MIN;
  for (const Bucket& b : buckets_) newest = std::max(newest, b.epoch);
  return newest;
}

void WindowLoads::read(std::span<const Candidate> candidates, int64_t now_ms, std::span<double> out) const {
  std::lock_guard lock(mutex_);
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto it = rings_.find(candidates[i].pod_id);
    out[i] = it == rings_.end() ? 0 : it->second.sum(now_ms, bucket_ms_);
  }
}

void WindowLoads::add(PodId pod, double cost, int64_t now_ms) {
  std::lock_guard lock(mutex_);
  rings_[pod].add(now_ms, bucket_ms_, cost);
  if (rings_.size() > kPrunedAbove) {
    const int64_t oldest = now_ms / bucket_ms_ - static_cast<int64_t>(kBuckets);
    std::erase_if(rings_, [oldest](const auto& entry) { return entry.second.newestEpoch() <= oldest; });
  }
}

}  // namespace prefixgate::routing
