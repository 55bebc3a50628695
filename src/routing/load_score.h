#pragma once
// The load signals every load-aware strategy shares: the capacity-aware load-balance score and the
// load-imbalance gate. Pure functions over plain numbers.
#include <cstdint>
#include <span>
#include <vector>

#include "config/config.h"
#include "prefixgate/strategy.h"

namespace prefixgate::routing {

// (running + lambda * waiting) / capacity * (1 + alpha * (1 - kv_free)^2); +infinity when kv_free < kv_critical.
// Lower is better. capacity <= 0 counts as 1. Until live engine metrics feed it, callers pass waiting 0,
// capacity 1 and kv_free 1, which reduces it to the gateway's own in-flight count.
double capacityLoadScore(double running, double waiting, double capacity, double kv_free,
                         const config::LoadBalanceConfig& config);

// The load-imbalance gate that runs before any strategy: when the in-flight counts are severely skewed
// (max - min > min_gap and, with 3+ pods, max > factor * (mean of the others + 1)), only the least-loaded
// candidates stay. Returns whether it fired.
bool applyImbalanceGate(std::vector<Candidate>& candidates, const config::LoadImbalanceConfig& config);

}  // namespace prefixgate::routing
