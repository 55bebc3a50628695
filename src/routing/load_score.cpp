#include "routing/load_score.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace prefixgate::routing {

double capacityLoadScore(double running, double waiting, double capacity, double kv_free,
                         const config::LoadBalanceConfig& config) {
  if (kv_free < config.kv_critical) return std::numeric_limits<double>::infinity();
  if (capacity <= 0) capacity = 1;
  const double used = 1 - kv_free;
  return (running + config.lambda * waiting) / capacity * (1 + config.alpha * used * used);
}

double kvFree(const Candidate& c) {
  if (std::isnan(c.kv_usage)) return 1;
  return 1 - std::clamp(c.kv_usage, 0.0, 1.0);
}

double fallbackCapacity(std::span<const Candidate> candidates) {
  double sum = 0;
  size_t measured = 0;
  for (const Candidate& c : candidates) {
    if (c.capacity > 0) {
      sum += c.capacity;
      ++measured;
    }
  }
  return measured ? sum / static_cast<double>(measured) : 1.0;
}

void capacityLoadScores(std::span<Candidate> candidates, const config::LoadBalanceConfig& config) {
  const double fallback = fallbackCapacity(candidates);
  for (Candidate& c : candidates)
    c.load_score = capacityLoadScore(c.in_flight, c.waiting, capacityOf(c, fallback), kvFree(c), config);
}

void ensureLoadScores(std::span<Candidate> candidates, const config::LoadBalanceConfig& config) {
  for (const Candidate& c : candidates) {
    if (std::isnan(c.load_score)) {
      capacityLoadScores(candidates, config);
      return;
    }
  }
}

size_t excludeInfiniteLoad(std::vector<Candidate>& candidates, std::vector<Candidate>& excluded) {
  auto infinite = [](const Candidate& c) { return std::isinf(c.load_score); };
  const size_t count = static_cast<size_t>(std::count_if(candidates.begin(), candidates.end(), infinite));
  if (count == 0 || count == candidates.size()) return 0;
  for (Candidate& c : candidates) {
    if (!infinite(c)) continue;
    excluded.push_back(c);
    excluded.back().excluded = true;
  }
  std::erase_if(candidates, infinite);
  return count;
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

double estimatedSeconds(const LatencyEstimate::Sample& s, int64_t now_ms, uint32_t half_life_ms) {
  if (s.samples == 0) return 0;
  const double idle = static_cast<double>(std::max<int64_t>(0, now_ms - s.last_ms));
  return s.seconds * std::exp2(-idle / static_cast<double>(half_life_ms));
}

size_t pickBest(std::span<const Candidate> candidates, std::mt19937_64& rng) {
  size_t best = 0;
  size_t ties = 1;
  for (size_t i = 1; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    const Candidate& b = candidates[best];
    const bool better = c.score > b.score || (c.score == b.score && c.in_flight < b.in_flight);
    const bool equal = c.score == b.score && c.in_flight == b.in_flight;
    if (better) {
      best = i;
      ties = 1;
    } else if (equal && std::uniform_int_distribution<size_t>(0, ties++)(rng) == 0) {
      best = i;  // reservoir sampling keeps each of the tied candidates equally likely
    }
  }
  return best;
}

}  // namespace prefixgate::routing
