#pragma once
// How the prefix-cache strategy turns prefix matches and loads into scores for the Router's pick (highest
// score; among equals fewer in-flight requests; then at random). Pure functions, unit-tested with AIBrix's
// own cases.
#include <cstdint>
#include <span>
#include <string_view>

#include "config/config.h"
#include "routing/prefix/model_rates.h"
#include "routing/service_rates.h"
#include "prefixgate/strategy.h"

namespace prefixgate::config {
class YamlReader;
}

namespace prefixgate::routing {

// Selection outcome labels (aibrix_prefix_cache_routing_selection_total).
inline constexpr std::string_view kPrefixMatch = "prefix_match";
inline constexpr std::string_view kPrefixMatchSkipped = "prefix_match_skipped";
inline constexpr std::string_view kLeastRequestFallback = "least_request_fallback";

// Sets each candidate's match_percent from its matched blocks (integer percent of total_blocks).
void setMatchPercents(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks);

// prefill-cost (NVIDIA Dynamo's KV router rule): per candidate, prefill_weight x the prompt blocks it would have to
// compute (total_blocks - matched) + the blocks of context it already serves (in_flight_tokens / block_tokens),
// into `cost_out`. Lower is cheaper.
// prefill-cost's settings (routing.strategies.prefill-cost), also used by the blend's prefill term.
struct PrefillCostSettings {
  static constexpr std::string_view kStrategyName = "prefill-cost";  // whose settings these are
  // A block to compute against a block of context being served. Dynamo's default is 1; 16 fits the engine
  // simulator (docs/benchmarks.md, "Every strategy": 1 spreads conversations away from their caches).
  double prefill_weight = 16;
  void read(config::YamlReader& r);
};
void prefillCosts(std::span<const Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks,
                  double block_tokens, double prefill_weight, std::span<double> cost_out);

// The blend: prefix score = matched fraction (0..1, never stretched, so a 5 % match stays weak) with weight
// prefix_weight; load score = capacity-aware score normalised so the least loaded gets 1 and the most loaded 0
// (all equal: 1) with weight load_weight. Fills score. The raw capacity-aware scores are the candidates'
// load_score as the Router computed them with the request's settings (per-model knobs); when any is missing
// (NaN: a caller other than the Router) they are all computed here with `load_config`. The chosen pod is not
// known here, so the caller labels the outcome (see outcomeOfBlend).
// With `prefill_costs` (prefillCosts; empty = none) and prefill_weight > 0, a third term: the cost min-max
// normalised so the cheapest candidate gets 1 and the dearest 0 (all equal: 1).
void blendScores(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks,
                 double prefix_weight, double load_weight, const config::LoadBalanceConfig& load_config,
                 std::span<const double> prefill_costs = {}, double prefill_weight = 0);
std::string_view outcomeOfBlend(std::span<const Candidate> candidates, size_t chosen);

// The standalone rule (blend off): pods holding a match, by match then load, the first whose load is at most
// mean + factor * sigma of the candidates' loads; else least-request. Returns the outcome label.
std::string_view standaloneScores(std::span<Candidate> candidates, std::span<const uint32_t> matched,
                                  size_t total_blocks, double factor);

// prefix-cache-preble (Preble, ICLR 2025), in prefill-token units: a prompt token computed costs 1, an output token
// decode_token_cost.
struct PrebleParams {
  double decode_token_cost = 1;  // one output token's decode work in prompt tokens' prefill work
  double rebalance_ratio = 1.5;  // rebalance when the busiest candidate's window load exceeds this x the least's
  double rebalance_min_gap = 0;  // ... and the least's by more than this (the loads' units)
};
inline constexpr std::string_view kPrebleExploit = "exploit";
inline constexpr std::string_view kPrebleExplore = "explore";
inline constexpr std::string_view kPrebleRebalance = "rebalance";
// Preble's rule over one decision's numbers: `cached_tokens[i]` = prompt tokens candidate i holds, `window_load[i]`
// = the work routed to it over the window (prefill of what it missed + decode of the outputs asked for),
// `output_tokens` = this request's. Rebalance when max load > rebalance_ratio x min load and max - min >
// rebalance_min_gap (a ratio alone fires over near-zero loads: on an idle fleet the pod that took one request
// looks infinitely busier than the others): the least-loaded candidate. Else exploit when the longest cached part
// is longer than the rest of the prompt: among candidates holding it, the least loaded. Else explore: the lowest
// window load + this request's prefill there (its missed tokens) + its decode. Fills score (higher wins: -cost;
// the chosen rule's losers below every winner) and load_score (the cost), returns the outcome label.
std::string_view prebleScores(std::span<Candidate> candidates, std::span<const double> cached_tokens,
                              double prompt_tokens, std::span<const double> window_load, double output_tokens,
                              const PrebleParams& params);

// The wait scorer (prefix-cache-wait): each candidate is scored by the request's estimated time to first token
// there, from the pod's learned rates (ServiceRates):
//   wait = base + its own uncached tokens x prefill s/token + the prefill tokens queued ahead of it x queue s/token
//          + decoding requests x decode s/request
// plus the prefill the choice makes the fleet do beyond the least any candidate would (fleet_work_weight x the
// extra uncached tokens x prefill s/token): a token computed on one pod delays the requests queued behind it, and
// a second copy of a prefix is work the fleet pays for again. The lowest sum wins: a request stays on the pod
// holding its prefix until that pod's queue costs more than the prefill a move would add ("sticky until
// saturated").
struct WaitSettings {
  static constexpr std::string_view kStrategyName = "prefix-cache-wait";  // whose settings these are
  // Responses a pod must have answered before its own rates count; until then it is scored with the fleet's rates
  // (each rate's median over the candidates that have that many), or when none has, the model's rates pooled over
  // its pods (ModelRates) once the pool has ModelRates::kMinSamples, else ServiceRates::kDefaults.
  uint32_t min_samples = 8;
  // Pods are scored with the fleet's rates unless a pod's own predict a time to first token for a reference request
  // (kWaitReferenceTokens uncached tokens) more than this fraction away from the fleet's (slower than 1 + x times,
  // or faster than 1 / (1 + x) times): per-pod fits of identical pods differ by about that much from noise (8
  // identical simulated pods learned 34,000 to 81,000 prefill tokens/s in one run), and that noise would move
  // requests off the pods holding their prefix.
  double speed_tolerance = 0.5;
  // New work is balanced (balanceNewWork): over the last window_ms, when the busiest candidate was sent more than
  // rebalance_ratio x the requests of the least busy, a request no pod holds half of goes to the least busy. 0 = off.
  uint32_t window_ms = 180000;
  double rebalance_ratio = 1.2;
  // The weight of the fleet's extra prefill against the request's own wait (0: the wait alone).
  double fleet_work_weight = 1;
  void read(config::YamlReader& r);
};
inline constexpr double kWaitReferenceTokens = 1000;
// The wait scorer's explanation (/debug/route: each pod's "wait"), its numbers in this order.
inline constexpr ExplanationKeys kWaitExplanation{
    "wait", {"total_ms", "base_ms", "prefill_ms", "queue_ms", "decode_ms", "fleet_work_ms"}, 6};
// Each candidate's rates (candidates[i].pod's, with the fleet's as above) into `out`. With `pooled`, a fleet
// where no candidate has min_samples of its own takes `model`'s rates pooled over its pods once the pool has
// ModelRates::kMinSamples (before kDefaults).
void candidateRates(std::span<const Candidate> candidates, const WaitSettings& settings,
                    std::span<ServiceRates::Rates> out, const ModelRates* pooled = nullptr,
                    std::string_view model = {});
// The wait scorer's balance of new work: a request whose best candidate holds less than half of it is mostly new
// work, and where it goes its follow-ups will follow (they extend it, and stay with their cache): when the
// candidates' window loads (requests sent over the window) are skewed (max > ratio x min), only the least loaded
// keep their wait score, the others score below every one of them. Returns whether it applied (ratio 0: never).
inline constexpr double kNewWorkCachedShare = 0.5;  // below this share cached on the best candidate: new work
bool balanceNewWork(std::span<Candidate> candidates, double best_cached_fraction, std::span<const double> window_load,
                    double ratio);

// Fills each candidate's wait (and its parts, work included), load_score (the wait) and score (-(wait + work)) from
// `uncached_tokens[i]` (prompt tokens candidate i is predicted to miss), its prefill queue (Candidate::prefill_tokens
// + queuedElsewhere) and its decoding requests (in_flight - prefill_requests). With `explanations` (one per
// candidate; empty = none asked) each gets the estimate and its parts (kWaitExplanation). `slot_wait_s` (one per
// candidate; empty = none): the expected wait for the busy slot its match counts on (slot waits), added to its queue
// part.
void waitScores(std::span<Candidate> candidates, std::span<const double> uncached_tokens, double prompt_tokens,
                std::span<const ServiceRates::Rates> rates, double fleet_work_weight,
                std::span<Explanation> explanations = {}, std::span<const double> slot_wait_s = {});

}  // namespace prefixgate::routing
