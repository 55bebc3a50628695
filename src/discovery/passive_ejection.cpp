#include "discovery/passive_ejection.h"

#include <algorithm>

namespace prefixgate::discovery {

bool PassiveEjection::podFailed(const config::HealthCheckConfig& config) {
  return ++pod_failures_ >= config.passive_failure_threshold;
}

bool PassiveEjection::requestFailed(uint64_t request_hash, const config::HealthCheckConfig& config) {
  // Bounded by the threshold: a streak that reached it stays there while an ejection is refused (the cap).
  if (request_hashes_.size() < config.distinct_request_failures &&
      std::find(request_hashes_.begin(), request_hashes_.end(), request_hash) == request_hashes_.end())
    request_hashes_.push_back(request_hash);
  return request_hashes_.size() >= config.distinct_request_failures;
}

void PassiveEjection::succeeded() {
  pod_failures_ = 0;
  request_hashes_.clear();
  ejections_ = 0;
}

int64_t PassiveEjection::ejected(const config::HealthCheckConfig& config) {
  pod_failures_ = 0;
  request_hashes_.clear();
  const uint32_t doublings = std::min<uint32_t>(ejections_++, 20);
  return std::min<int64_t>(int64_t{config.eject_base_ms} << doublings, config.eject_max_ms);
}

}  // namespace prefixgate::discovery
