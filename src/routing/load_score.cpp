#include "routing/load_score.h"

#include <algorithm>
#include <limits>

namespace prefixgate::routing {

double capacityLoadScore(double running, double waiting, double capacity, double kv_free,
                         const config::LoadBalanceConfig& config) {
  if (kv_free < config.kv_critical) return std::numeric_limits<double>::infinity();
  if (capacity <= 0) capacity = 1;
  const double used = 1 - kv_free;
  return (running + config.lambda * waiting) / capacity * (1 + config.alpha * used * used);
}

bool applyImbalanceGate(std::vector<Candidate>& candidates, const config::LoadImbalanceConfig& config) {
  if (candidates.size() < 2) return false;
  auto [lo, hi] = std::minmax_element(candidates.begin(), candidates.end(),
                                      [](const Candidate& a, const Candidate& b) { return a.in_flight < b.in_flight; });
  const int32_t min = lo->in_flight, max = hi->in_flight;
  if (max - min <= static_cast<int32_t>(config.min_gap)) return false;
  if (candidates.size() >= 3) {
    double others = 0;
    for (const Candidate& c : candidates) others += c.in_flight;
    others = (others - max) / static_cast<double>(candidates.size() - 1);
    if (max <= config.factor * (others + 1)) return false;
  }
  std::erase_if(candidates, [min](const Candidate& c) { return c.in_flight != min; });
  return true;
}

}  // namespace prefixgate::routing
