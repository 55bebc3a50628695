#include "routing/prefix/selection.h"

#include <algorithm>
#include <cmath>

#include "routing/load_score.h"

namespace prefixgate::routing {

void setMatchPercents(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks) {
  for (size_t i = 0; i < candidates.size(); ++i)
    candidates[i].match_percent = total_blocks ? static_cast<int>(matched[i] * 100 / total_blocks) : 0;
}

void blendScores(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks,
                 double prefix_weight, double load_weight, const config::LoadBalanceConfig& load_config) {
  setMatchPercents(candidates, matched, total_blocks);
  ensureLoadScores(candidates, load_config);
  // Min-max over the finite scores; an infinite one (KV nearly full; only when every pod is, since the Router
  // excludes them otherwise) counts as the most loaded.
  double lo = INFINITY, hi = -INFINITY;
  for (const Candidate& c : candidates) {
    if (std::isinf(c.load_score)) continue;
    lo = std::min(lo, c.load_score);
    hi = std::max(hi, c.load_score);
  }
  const double total_weight = prefix_weight + load_weight;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    const double prefix = total_blocks ? static_cast<double>(matched[i]) / static_cast<double>(total_blocks) : 0.0;
    double load = hi > lo ? (hi - c.load_score) / (hi - lo) : 1.0;
    if (std::isinf(c.load_score)) load = lo <= hi ? 0.0 : 1.0;  // all infinite: load does not decide
    c.score = (prefix_weight * prefix + load_weight * load) / total_weight;
  }
}

std::string_view outcomeOfBlend(std::span<const Candidate> candidates, size_t chosen) {
  int best = 0;
  for (const Candidate& c : candidates) best = std::max(best, c.match_percent);
  if (best == 0) return kLeastRequestFallback;
  return candidates[chosen].match_percent == best ? kPrefixMatch : kPrefixMatchSkipped;
}

std::string_view standaloneScores(std::span<Candidate> candidates, std::span<const uint32_t> matched,
                                  size_t total_blocks, double factor) {
  setMatchPercents(candidates, matched, total_blocks);
  double mean = 0;
  for (const Candidate& c : candidates) mean += c.in_flight;
  mean /= static_cast<double>(candidates.size());
  double variance = 0;
  for (const Candidate& c : candidates) variance += (c.in_flight - mean) * (c.in_flight - mean);
  const double threshold = mean + factor * std::sqrt(variance / static_cast<double>(candidates.size()));

  bool any_match = false, any_pass = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    c.load_score = c.in_flight;
    const bool holds = matched[i] > 0;
    const bool passes = holds && c.in_flight <= threshold;
    any_match |= holds;
    any_pass |= passes;
    // Passing holders rank by match (the Router then prefers fewer in flight, then picks at random).
    c.score = passes ? 1.0 + static_cast<double>(matched[i]) / static_cast<double>(total_blocks) : 0.0;
  }
  if (any_pass) return kPrefixMatch;
  for (Candidate& c : candidates) c.score = -static_cast<double>(c.in_flight);  // least-request
  return any_match ? kPrefixMatchSkipped : kLeastRequestFallback;
}

}  // namespace prefixgate::routing
