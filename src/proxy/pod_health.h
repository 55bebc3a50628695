#pragma once
// The relay's health verdicts applied to the pods: PodState keeps each pod's streaks (PassiveEjection), and an
// ejection happens only while it leaves at most health_check.max_ejection_percent of every model the pod serves
// ejected, so failures can never take a whole model out of routing.
#include <functional>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "proxy/failover.h"

namespace prefixgate::proxy {

class PodHealth : public HealthSink {
 public:
  using NowMs = std::function<int64_t()>;
  // `pods` and `config` outlive this object. Thread-safe, like PodState.
  PodHealth(const discovery::PodRegistry& pods, const config::HealthCheckConfig& config, NowMs now_ms);
  void podFailed(discovery::PodState& pod) override;
  void requestFailed(discovery::PodState& pod, uint64_t request_hash) override;
  void succeeded(discovery::PodState& pod) override;

 private:
  void ejectIfAllowed(discovery::PodState& pod);
  const discovery::PodRegistry& pods_;
  const config::HealthCheckConfig& config_;
  NowMs now_ms_;
};

// True when ejecting `pod` leaves at most `max_percent` of the pods (not removed) of each model it serves in
// `set` ejected at `now_ms`.
bool ejectionAllowed(const discovery::PodSet& set, const discovery::PodState& pod, uint32_t max_percent,
                     int64_t now_ms);

}  // namespace prefixgate::proxy
