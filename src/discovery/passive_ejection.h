#pragma once
// Passive ejection policy of one pod, from what the relay saw: failures only the pod can cause count in a row up to
// health_check.passive_failure_threshold; failures a request may have caused (a reset before the response, a 5xx)
// count only when they come from health_check.distinct_request_failures different requests in a row, so one
// poisoned request repeated cannot eject a pod. A success ends both streaks. Not thread-safe (PodState locks it);
// no clock: the caller turns the back-off into a deadline.
#include <cstdint>
#include <vector>

#include "config/config.h"

namespace prefixgate::discovery {

class PassiveEjection {
 public:
  // Each returns true when the streak now calls for an ejection.
  bool podFailed(const config::HealthCheckConfig& config);
  bool requestFailed(uint64_t request_hash, const config::HealthCheckConfig& config);
  // Ends the streaks and the back-off doubling.
  void succeeded();
  // An ejection took place: the streaks restart and the back-off it lasts is returned (eject_base_ms, doubling per
  // ejection in a row, at most eject_max_ms).
  int64_t ejected(const config::HealthCheckConfig& config);
  // No streak and no doubling in force (a success would change nothing).
  bool clean() const { return pod_failures_ == 0 && request_hashes_.empty() && ejections_ == 0; }
  uint32_t ejections() const { return ejections_; }

 private:
  uint32_t pod_failures_ = 0;
  std::vector<uint64_t> request_hashes_;  // the different requests that failed in a row (at most the threshold)
  uint32_t ejections_ = 0;
};

}  // namespace prefixgate::discovery
