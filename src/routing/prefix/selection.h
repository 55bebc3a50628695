#pragma once
// How the prefix-cache strategy turns prefix matches and loads into scores for the Router's pick (highest
// score; among equals fewer in-flight requests; then at random). Pure functions, unit-tested with AIBrix's
// own cases.
#include <cstdint>
#include <span>
#include <string_view>

#include "config/config.h"
#include "prefixgate/strategy.h"

namespace prefixgate::routing {

// Selection outcome labels (aibrix_prefix_cache_routing_selection_total).
inline constexpr std::string_view kPrefixMatch = "prefix_match";
inline constexpr std::string_view kPrefixMatchSkipped = "prefix_match_skipped";
inline constexpr std::string_view kLeastRequestFallback = "least_request_fallback";

// Sets each candidate's match_percent from its matched blocks (integer percent of total_blocks).
void setMatchPercents(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks);

// The blend: prefix score = matched fraction (0..1, never stretched, so a 5 % match stays weak) with weight
// prefix_weight; load score = capacity-aware score normalised so the least loaded gets 1 and the most loaded 0
// (all equal: 1) with weight load_weight. Fills score. The raw capacity-aware scores are the candidates'
// load_score as the Router computed them with the request's settings (per-model knobs); when any is missing
// (NaN: a caller other than the Router) they are all computed here with `load_config`. The chosen pod is not
// known here, so the caller labels the outcome (see outcomeOfBlend).
void blendScores(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks,
                 double prefix_weight, double load_weight, const config::LoadBalanceConfig& load_config);
std::string_view outcomeOfBlend(std::span<const Candidate> candidates, size_t chosen);

// The standalone rule (blend off): pods holding a match, by match then load, the first whose load is at most
// mean + factor * sigma of the candidates' loads; else least-request. Returns the outcome label.
std::string_view standaloneScores(std::span<Candidate> candidates, std::span<const uint32_t> matched,
                                  size_t total_blocks, double factor);

}  // namespace prefixgate::routing
