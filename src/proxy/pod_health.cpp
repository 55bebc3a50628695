#include "proxy/pod_health.h"

#include "util/log.h"

namespace prefixgate::proxy {

bool ejectionAllowed(const discovery::PodSet& set, const discovery::PodState& pod, uint32_t max_percent,
                     int64_t now_ms) {
  for (const std::string& model : pod.spec().models) {
    const auto* serving = set.podsFor(model);
    if (!serving) continue;
    uint64_t live = 0;
    uint64_t ejected = 1;  // the pod about to be ejected
    for (const discovery::PodPtr& p : *serving) {
      if (p->removed()) continue;
      ++live;
      if (p.get() != &pod && now_ms < p->ejectedUntilMs()) ++ejected;
    }
    if (ejected * 100 > uint64_t{max_percent} * live) return false;
  }
  return true;
}

PodHealth::PodHealth(const discovery::PodRegistry& pods, const config::HealthCheckConfig& config, NowMs now_ms)
    : pods_(pods), config_(config), now_ms_(std::move(now_ms)) {}

void PodHealth::podFailed(discovery::PodState& pod) {
  if (pod.recordPodFailure(config_)) ejectIfAllowed(pod);
}

void PodHealth::requestFailed(discovery::PodState& pod, uint64_t request_hash) {
  if (pod.recordRequestFailure(request_hash, config_)) ejectIfAllowed(pod);
}

void PodHealth::succeeded(discovery::PodState& pod) { pod.recordSuccess(); }

void PodHealth::ejectIfAllowed(discovery::PodState& pod) {
  const int64_t now = now_ms_();
  if (!ejectionAllowed(*pods_.snapshot(), pod, config_.max_ejection_percent, now)) {
    log::debug("pod {} not ejected: health_check.max_ejection_percent of its models' pods are ejected", pod.name());
    return;
  }
  pod.ejectPassively(now, config_);
  log::warn("pod {} ejected from routing until its back-off ends (passive failures)", pod.name());
}

}  // namespace prefixgate::proxy
