#include "routing/prefix/selection.h"

#include <algorithm>
#include <cmath>

#include "config/yaml_reader.h"
#include "discovery/pod_set.h"
#include "routing/load_score.h"
#include "routing/router.h"

namespace prefixgate::routing {

void setMatchPercents(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks) {
  for (size_t i = 0; i < candidates.size(); ++i)
    candidates[i].match_percent = total_blocks ? static_cast<int>(matched[i] * 100 / total_blocks) : 0;
}

void PrefillCostSettings::read(config::YamlReader& r) {
  r.read("prefill_weight", prefill_weight);
  if (!(prefill_weight >= 0) || prefill_weight > 1000) r.problem("prefill_weight", "must be between 0 and 1000");
}

void prefillCosts(std::span<const Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks,
                  double block_tokens, double prefill_weight, std::span<double> cost_out) {
  const double per_block = block_tokens > 0 ? block_tokens : 1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const double to_compute = static_cast<double>(total_blocks - std::min<size_t>(matched[i], total_blocks));
    cost_out[i] = prefill_weight * to_compute + std::max(0.0, candidates[i].in_flight_tokens) / per_block;
  }
}

void blendScores(std::span<Candidate> candidates, std::span<const uint32_t> matched, size_t total_blocks,
                 double prefix_weight, double load_weight, const config::LoadBalanceConfig& load_config,
                 std::span<const double> prefill_costs, double prefill_weight) {
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
  const bool with_prefill = prefill_weight > 0 && prefill_costs.size() == candidates.size();
  double cost_lo = INFINITY, cost_hi = -INFINITY;
  if (with_prefill) {
    for (double cost : prefill_costs) {
      cost_lo = std::min(cost_lo, cost);
      cost_hi = std::max(cost_hi, cost);
    }
  }
  const double total_weight = prefix_weight + load_weight + (with_prefill ? prefill_weight : 0);
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    const double prefix = total_blocks ? static_cast<double>(matched[i]) / static_cast<double>(total_blocks) : 0.0;
    double load = hi > lo ? (hi - c.load_score) / (hi - lo) : 1.0;
    if (std::isinf(c.load_score)) load = lo <= hi ? 0.0 : 1.0;  // all infinite: load does not decide
    double sum = prefix_weight * prefix + load_weight * load;
    if (with_prefill)
      sum += prefill_weight * (cost_hi > cost_lo ? (cost_hi - prefill_costs[i]) / (cost_hi - cost_lo) : 1.0);
    c.score = sum / total_weight;
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

std::string_view prebleScores(std::span<Candidate> candidates, std::span<const double> cached_tokens,
                              double prompt_tokens, std::span<const double> window_load, double output_tokens,
                              const PrebleParams& params) {
  const size_t n = candidates.size();
  double lo = INFINITY, hi = -INFINITY, best_cached = 0;
  for (size_t i = 0; i < n; ++i) {
    lo = std::min(lo, window_load[i]);
    hi = std::max(hi, window_load[i]);
    best_cached = std::max(best_cached, cached_tokens[i]);
  }
  const double decode = params.decode_token_cost * output_tokens;
  // Each rule keeps some candidates and ranks them by a cost; the others score below every kept one.
  std::string_view outcome = kPrebleExplore;  // mostly new: the lowest load after this request's own work there
  if (hi > params.rebalance_ratio * lo && hi > 0 && hi - lo > params.rebalance_min_gap)
    outcome = kPrebleRebalance;  // the least-loaded candidates take the request until loads even out
  else if (best_cached > 0 && best_cached > prompt_tokens - best_cached)
    outcome = kPrebleExploit;  // the cached part is longer than the new part: stay with the cache, least loaded
  auto kept = [&](size_t i) {
    if (outcome == kPrebleRebalance) return window_load[i] == lo;
    if (outcome == kPrebleExploit) return cached_tokens[i] == best_cached;
    return true;
  };
  auto rank = [&](size_t i) {
    if (outcome != kPrebleExplore) return window_load[i];
    return window_load[i] + std::max(0.0, prompt_tokens - cached_tokens[i]) + decode;
  };
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, rank(i));
  for (size_t i = 0; i < n; ++i) {
    Candidate& c = candidates[i];
    c.load_score = rank(i);
    c.score = kept(i) ? -c.load_score : -(worst + 1) - c.load_score;
    c.match_percent = prompt_tokens > 0 ? static_cast<int>(std::min(1.0, cached_tokens[i] / prompt_tokens) * 100) : 0;
  }
  return outcome;
}

void WaitSettings::read(config::YamlReader& r) {
  r.read("min_samples", min_samples);
  r.read("speed_tolerance", speed_tolerance);
  if (min_samples > 1000000) r.problem("min_samples", "must be at most 1000000");
  r.read("window_ms", window_ms);
  r.read("rebalance_ratio", rebalance_ratio);
  r.read("fleet_work_weight", fleet_work_weight);
  if (!(fleet_work_weight >= 0) || fleet_work_weight > 100) r.problem("fleet_work_weight", "must be between 0 and 100");
  if (!(speed_tolerance >= 0) || speed_tolerance > 100) r.problem("speed_tolerance", "must be between 0 and 100");
  if (window_ms < 60) r.problem("window_ms", "must be at least 60");
  if (!(rebalance_ratio == 0 || rebalance_ratio >= 1)) r.problem("rebalance_ratio", "must be 0 (off) or at least 1");
}

bool balanceNewWork(std::span<Candidate> candidates, double best_cached_fraction, std::span<const double> window_load,
                    double ratio) {
  if (ratio <= 0 || best_cached_fraction >= kNewWorkCachedShare || candidates.empty()) return false;
  const auto [lo, hi] = std::minmax_element(window_load.begin(), window_load.end());
  if (!(*hi > ratio * *lo)) return false;
  double worst = 0;
  for (const Candidate& c : candidates) worst = std::max(worst, -c.score);
  for (size_t i = 0; i < candidates.size(); ++i)
    if (window_load[i] != *lo) candidates[i].score = -(worst + 1) + candidates[i].score;
  return true;
}

void candidateRates(std::span<const Candidate> candidates, const WaitSettings& settings,
                    std::span<ServiceRates::Rates> out, const ModelRates* pooled, std::string_view model) {
  using Rates = ServiceRates::Rates;
  auto learned = [&](const Rates& r) { return r.samples > 0 && r.samples >= settings.min_samples; };
  // The fleet's rates: each rate's median over the pods that learned theirs (one odd pod does not move it).
  thread_local std::vector<double> base, prefill, queue, decode;
  base.clear();
  prefill.clear();
  queue.clear();
  decode.clear();
  for (size_t i = 0; i < candidates.size(); ++i) {
    out[i] = candidates[i].pod ? candidates[i].pod->signals().rates().read() : ServiceRates::kDefaults;
    if (!learned(out[i])) continue;
    base.push_back(out[i].base_s);
    prefill.push_back(out[i].prefill_s_per_token);
    queue.push_back(out[i].queue_s_per_token);
    decode.push_back(out[i].decode_s_per_request);
  }
  auto median = [](std::vector<double>& v) {  // linear time: every decision computes four
    const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return v.size() % 2 ? *mid : (*std::max_element(v.begin(), mid) + *mid) / 2;
  };
  Rates fleet = ServiceRates::kDefaults;
  if (!base.empty()) {
    fleet = {median(base), median(prefill), median(queue), median(decode), 0};
  } else if (pooled) {
    const Rates model_rates = pooled->read(model);
    if (model_rates.samples >= ModelRates::kMinSamples) fleet = {model_rates.base_s, model_rates.prefill_s_per_token, model_rates.queue_s_per_token,
                                       model_rates.decode_s_per_request, 0};
  }
  // A pod keeps its own rates only when it is measurably faster or slower than the fleet: its predicted time to
  // first token for a reference request beyond speed_tolerance of the fleet's.
  auto reference = [](const Rates& r) { return r.base_s + kWaitReferenceTokens * r.prefill_s_per_token; };
  const double fleet_reference = reference(fleet);
  for (Rates& r : out) {
    if (!learned(r)) {
      r = fleet;
      continue;
    }
    const double ratio = reference(r) / fleet_reference;
    if (ratio <= 1 + settings.speed_tolerance && ratio >= 1 / (1 + settings.speed_tolerance)) r = fleet;
  }
}

void waitScores(std::span<Candidate> candidates, std::span<const double> uncached_tokens, double prompt_tokens,
                std::span<const ServiceRates::Rates> rates, double fleet_work_weight,
                std::span<Explanation> explanations, std::span<const double> slot_wait_s) {
  double least_uncached = INFINITY;
  for (size_t i = 0; i < candidates.size(); ++i) least_uncached = std::min(least_uncached, std::max(0.0, uncached_tokens[i]));
  for (size_t i = 0; i < candidates.size(); ++i) {
    Candidate& c = candidates[i];
    const ServiceRates::Rates& r = rates[i];
    const double uncached = std::max(0.0, uncached_tokens[i]);
    const double base = r.base_s;
    const double prefill = uncached * r.prefill_s_per_token;
    const double queue = (std::max(0.0, c.prefill_tokens) + queuedElsewhere(c, prompt_tokens)) * r.queue_s_per_token +
                         (i < slot_wait_s.size() ? slot_wait_s[i] : 0);
    const double decode = std::max(0, c.in_flight - c.prefill_requests) * r.decode_s_per_request;
    const double total = base + prefill + queue + decode;
    const double work = fleet_work_weight * (uncached - least_uncached) * r.prefill_s_per_token;
    c.load_score = total;
    c.score = -(total + work);
    // The estimate and its parts, in milliseconds (/debug/route's "wait").
    if (i < explanations.size())
      explanations[i] = {&kWaitExplanation,
                         {total * 1000, base * 1000, prefill * 1000, queue * 1000, decode * 1000, work * 1000}};
  }
}

}  // namespace prefixgate::routing
