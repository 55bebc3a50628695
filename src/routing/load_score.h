#pragma once
// The load signals every load-aware strategy shares: the capacity-aware load-balance score and the
// load-imbalance gate. Pure functions over plain numbers.
#include <cstdint>
#include <span>
#include <vector>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "prefixgate/strategy.h"

namespace prefixgate::routing {

// (running + lambda * waiting) / capacity * (1 + alpha * (1 - kv_free)^2); +infinity when kv_free < kv_critical.
// Lower is better. capacity <= 0 counts as 1.
double capacityLoadScore(double running, double waiting, double capacity, double kv_free,
                         const config::LoadBalanceConfig& config);

// A candidate's free KV fraction: 1 - its KV usage clamped to 0..1; 1 (no pressure) when unknown.
double kvFree(const Candidate& c);

// The capacity a candidate without a measured one is scored with: the mean of the candidates that have one,
// or 1 when none has (then the score is a count of requests, as before any traffic was measured).
double fallbackCapacity(std::span<const Candidate> candidates);
// The candidate's measured capacity, or `fallback` when it has none.
inline double capacityOf(const Candidate& c, double fallback) { return c.capacity > 0 ? c.capacity : fallback; }

// Fills every candidate's load_score with capacityLoadScore, where running = the gateway's in-flight count (read
// at the moment of choice, so a burst spreads), waiting = the engine's, kv_free = kvFree, capacity = capacityOf.
void capacityLoadScores(std::span<Candidate> candidates, const config::LoadBalanceConfig& config);

// Keeps the load_score the Router computed (with the request's per-model settings) when every candidate has one;
// otherwise (a caller other than the Router, such as a test) computes them all with `config`.
void ensureLoadScores(std::span<Candidate> candidates, const config::LoadBalanceConfig& config);

// The KV-critical filter: candidates whose load_score is infinite (KV cache nearly full) move to `excluded`,
// marked excluded, unless every candidate would (then all stay: a full pod still beats none). Returns how many
// moved. Expects capacityLoadScores to have run.
size_t excludeInfiniteLoad(std::vector<Candidate>& candidates, std::vector<Candidate>& excluded);

// The load-imbalance gate that runs before any strategy: when the in-flight counts are severely skewed
// (max - min > min_gap and, with 3+ pods, max > factor * (mean of the others + 1)), only the least-loaded
// candidates stay. Returns whether it fired.
bool applyImbalanceGate(std::vector<Candidate>& candidates, const config::LoadImbalanceConfig& config);

// least-latency's estimate of a pod's time to first byte now: its EWMA halved every `half_life_ms` since its last
// answer (a pod avoided since it was slow is tried again); 0 when never measured.
double estimatedSeconds(const LatencyEstimate::Sample& sample, int64_t now_ms, uint32_t half_life_ms);

// The Router's pick (public for tests and /debug): the highest score; among equal scores the fewest in flight;
// among those, each equally likely (reservoir sampling with `rng`). `candidates` must not be empty.
size_t pickBest(std::span<const Candidate> candidates, std::mt19937_64& rng);

}  // namespace prefixgate::routing
