#include "engine_sim/host_prompt_cache.h"

#include <algorithm>

namespace prefixgate::sim {

size_t commonPrefix(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  size_t n = std::min(a.size(), b.size());
  auto mismatch = std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n), b.begin());
  return static_cast<size_t>(mismatch.first - a.begin());
}

HostPromptCache::SavePlan HostPromptCache::planSave(std::span<const uint32_t> tokens) const {
  SavePlan plan;
  // prompt_save: an empty slot saves nothing.
  if (!enabled() || tokens.empty()) return plan;
  // alloc: "prompt is already in the cache, skipping".
  for (const auto& entry : entries_)
    if (commonPrefix(entry, tokens) == tokens.size()) return plan;
  // alloc: "skip over-limit entries to avoid disturbing the cache".
  if (tokens.size() > limit_tokens_) return plan;
  plan.save = true;
  // alloc: "remove any cached prompts that are fully contained in the current prompt".
  uint64_t kept = total_tokens_;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (commonPrefix(entries_[i], tokens) != entries_[i].size()) continue;
    if (plan.dropped.empty()) plan.dropped.assign(entries_.size(), false);
    plan.dropped[i] = true;
    kept -= entries_[i].size();
  }
  // alloc's "make room" (and update's limit): the oldest go until the new entry fits.
  for (size_t i = 0; i < entries_.size() && kept + tokens.size() > limit_tokens_; ++i) {
    if (!plan.dropped.empty() && plan.dropped[i]) continue;
    if (plan.dropped.empty()) plan.dropped.assign(entries_.size(), false);
    plan.dropped[i] = true;
    kept -= entries_[i].size();
  }
  return plan;
}

bool HostPromptCache::save(std::span<const uint32_t> tokens) {
  SavePlan plan = planSave(tokens);
  if (!plan.save) return false;
  if (!plan.dropped.empty()) {
    std::deque<std::vector<uint32_t>> kept;
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (plan.dropped[i]) {
        total_tokens_ -= entries_[i].size();
      } else {
        kept.push_back(std::move(entries_[i]));
      }
    }
    entries_.swap(kept);
  }
  entries_.emplace_back(tokens.begin(), tokens.end());
  total_tokens_ += tokens.size();
  return true;
}

std::optional<size_t> HostPromptCache::findBetter(std::span<const uint32_t> held, std::span<const uint32_t> prompt,
                                                  const std::vector<bool>& dropped) const {
  if (prompt.empty()) return std::nullopt;
  // In float, as load() compares them: the same inputs take the same decisions.
  const auto prompt_size = static_cast<float>(prompt.size());
  const size_t lcp_best = commonPrefix(held, prompt);
  // An empty slot: any entry that shares something wins.
  float f_keep_best = held.empty() ? -1.0f : static_cast<float>(lcp_best) / static_cast<float>(held.size());
  float f_sim_best = static_cast<float>(lcp_best) / prompt_size;
  std::optional<size_t> best;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!dropped.empty() && dropped[i]) continue;
    const auto lcp = static_cast<float>(commonPrefix(entries_[i], prompt));
    const float f_keep = lcp / static_cast<float>(entries_[i].size());
    const float f_sim = lcp / prompt_size;
    if (f_keep < kRestoreMinKeep) continue;
    if (f_keep_best < f_keep && f_sim_best < f_sim) {
      f_keep_best = f_keep;
      f_sim_best = f_sim;
      best = i;
    }
  }
  return best;
}

std::vector<uint32_t> HostPromptCache::take(size_t index) {
  std::vector<uint32_t> tokens = std::move(entries_[index]);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(index));
  total_tokens_ -= tokens.size();
  return tokens;
}

void HostPromptCache::clear() {
  entries_.clear();
  total_tokens_ = 0;
}

}  // namespace prefixgate::sim
