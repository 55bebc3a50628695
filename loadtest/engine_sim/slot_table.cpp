#include "engine_sim/slot_table.h"

#include <algorithm>

namespace prefixgate::sim {
namespace {

// n_past: the common prefix, less the last prompt token when it covers the whole prompt.
uint64_t cachedTokens(std::span<const uint32_t> held, std::span<const uint32_t> prompt) {
  size_t lcp = commonPrefix(held, prompt);
  return lcp == prompt.size() && lcp > 0 ? lcp - 1 : lcp;
}

}  // namespace

SlotTable::SlotTable(const SlotTableConfig& config)
    : config_(config), slots_(std::max<uint32_t>(config.slots, 1)), host_cache_(config.host_cache_tokens) {}

std::optional<SlotTable::Choice> SlotTable::choose(std::span<const uint32_t> prompt) const {
  std::optional<Choice> choice;
  // In float, as get_available_slot compares them.
  if (config_.prompt_similarity != 0.0f && !prompt.empty()) {
    float f_sim_best = 0;
    for (uint32_t id = 0; id < slots_.size(); ++id) {
      const Slot& slot = slots_[id];
      if (slot.busy || slot.tokens.empty()) continue;
      float f_sim = static_cast<float>(commonPrefix(slot.tokens, prompt)) / static_cast<float>(prompt.size());
      if (f_sim > f_sim_best && f_sim > config_.prompt_similarity) {
        f_sim_best = f_sim;
        choice = Choice{id, true, false};
      }
    }
    if (choice) {
      float f_keep = (f_sim_best * static_cast<float>(prompt.size())) /
                     static_cast<float>(slots_[choice->slot].tokens.size());
      // "if we are about to lose a large portion of the existing context - save it in the prompt cache".
      choice->update_cache = f_keep < kSaveBelowKeep;
      return choice;
    }
  }
  int64_t t_last = -1;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    const Slot& slot = slots_[id];
    if (slot.busy) continue;
    if (!choice || slot.last_used <= t_last) {
      t_last = slot.last_used;
      choice = Choice{id, false, true};
    }
  }
  return choice;
}

std::optional<SlotAssignment> SlotTable::preview(std::span<const uint32_t> prompt, bool use_host_cache) const {
  std::optional<Choice> choice = choose(prompt);
  if (!choice) return std::nullopt;
  const std::vector<uint32_t>& slot_tokens = slots_[choice->slot].tokens;
  SlotAssignment assignment{choice->slot, choice->by_similarity};
  std::span<const uint32_t> held = slot_tokens;
  if (usesHostCache(*choice, use_host_cache)) {
    // The save comes first: the room it makes may evict the entry the prompt would have restored.
    HostPromptCache::SavePlan save = host_cache_.planSave(slot_tokens);
    assignment.saved = save.save;
    if (auto best = host_cache_.findBetter(slot_tokens, prompt, save.dropped)) {
      held = host_cache_.entry(*best);
      assignment.restored_tokens = held.size();
    }
  }
  assignment.cached_tokens = cachedTokens(held, prompt);
  return assignment;
}

std::optional<SlotAssignment> SlotTable::assign(std::span<const uint32_t> prompt, bool use_host_cache) {
  std::optional<Choice> choice = choose(prompt);
  if (!choice) return std::nullopt;
  Slot& slot = slots_[choice->slot];
  SlotAssignment assignment{choice->slot, choice->by_similarity};
  if (usesHostCache(*choice, use_host_cache)) {
    assignment.saved = host_cache_.save(slot.tokens);
    // The entry just saved holds the slot's own tokens: never strictly better, so never taken back here.
    if (auto best = host_cache_.findBetter(slot.tokens, prompt)) {
      slot.tokens = host_cache_.take(*best);
      assignment.restored_tokens = slot.tokens.size();
    }
  }
  assignment.cached_tokens = cachedTokens(slot.tokens, prompt);
  slot.tokens.resize(assignment.cached_tokens);  // keep_first(n_past): the rest is overwritten
  slot.busy = true;
  if (config_.save_idle_slots && host_cache_.enabled()) {
    for (const Slot& idle : slots_)
      if (!idle.busy) host_cache_.save(idle.tokens);
  }
  return assignment;
}

void SlotTable::release(uint32_t id, std::span<const uint32_t> tokens) {
  Slot& slot = slots_[id];
  slot.tokens.assign(tokens.begin(), tokens.end());
  slot.busy = false;
  slot.last_used = releases_++;
}

bool SlotTable::clear() {
  if (busyCount() != 0) return false;
  for (Slot& slot : slots_) slot.tokens.clear();
  host_cache_.clear();
  return true;
}

size_t SlotTable::busyCount() const {
  return static_cast<size_t>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; }));
}

}  // namespace prefixgate::sim
