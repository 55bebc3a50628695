#pragma once
// llama-server's slots and how a request gets one (get_available_slot and the prompt cache calls around it in
// tools/server/server-context.cpp), pure: no sockets, no clocks (recency is a counter of releases).
//
// Each slot keeps the tokens whose KV it holds: those of the last request it served (prompt and output). A
// request is assigned an idle slot:
//   1. by similarity (when prompt_similarity > 0): the idle, non-empty slot whose tokens share the longest common
//      prefix with the prompt, if that prefix is more than prompt_similarity of the prompt (ties: the lower id);
//   2. else by recency: the least recently released idle slot (never-used slots first; ties: the higher id, as
//      llama-server's `t_last_used <= t_last` picks).
// With the host cache on, and for a slot chosen by recency or sharing less than half of its tokens with the
// prompt (f_keep < 0.5), the slot's tokens are saved to the host cache, and the entry that fits the prompt better
// than the slot (HostPromptCache::findBetter) is restored into it. The request's cached tokens are then the
// common prefix of the slot's tokens and the prompt, at most prompt - 1 (the last prompt token is always
// evaluated again, [TAG_PROMPT_LOGITS]). With save_idle_slots (llama-server's --cache-idle-slots, on by default
// with --cache-ram), after each assignment every idle slot's tokens are saved too (copies: the slots keep them).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine_sim/host_prompt_cache.h"

namespace prefixgate::sim {

struct SlotTableConfig {
  uint32_t slots = 1;
  float prompt_similarity = 0.1f;  // --slot-prompt-similarity; 0 = assign by recency only
  uint64_t host_cache_tokens = 0;  // --host-cache-tokens; 0 = no host cache
  bool save_idle_slots = true;     // --host-cache-idle-slots
};

struct SlotAssignment {
  uint32_t slot = 0;
  bool by_similarity = false;    // chosen by prompt similarity (else by recency)
  bool saved = false;            // the slot's previous tokens went to the host cache
  uint64_t restored_tokens = 0;  // tokens restored from the host cache into the slot (0: none)
  uint64_t cached_tokens = 0;    // prompt tokens the request finds in the slot, at most prompt - 1
};

class SlotTable {
 public:
  // The most the similarity choice leaves of a slot's tokens without saving them first (f_keep).
  static constexpr float kSaveBelowKeep = 0.5f;

  explicit SlotTable(const SlotTableConfig& config);

  // What assign() would do now, without doing it; nullopt when no slot is idle.
  std::optional<SlotAssignment> preview(std::span<const uint32_t> prompt, bool use_host_cache) const;
  // Assigns an idle slot (it becomes busy), saving to and restoring from the host cache as llama-server does;
  // nullopt when every slot is busy (the request is deferred). use_host_cache: llama-server updates the prompt
  // cache for completion tasks only.
  std::optional<SlotAssignment> assign(std::span<const uint32_t> prompt, bool use_host_cache);
  // The slot's request ended: the slot holds `tokens` (the tokens its KV was computed for) and is idle, the most
  // recently used.
  void release(uint32_t slot, std::span<const uint32_t> tokens);
  // Empties every slot and the host cache; refused (false) while a slot is busy.
  bool clear();

  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }
  bool busy(uint32_t slot) const { return slots_[slot].busy; }
  size_t busyCount() const;
  // The tokens a slot holds (while busy: the ones it held when assigned, up to the cached prefix).
  const std::vector<uint32_t>& held(uint32_t slot) const { return slots_[slot].tokens; }
  const HostPromptCache& hostCache() const { return host_cache_; }

 private:
  struct Slot {
    std::vector<uint32_t> tokens;
    bool busy = false;
    int64_t last_used = -1;  // release counter at its last release; -1 = never used
  };
  struct Choice {
    uint32_t slot = 0;
    bool by_similarity = false;
    bool update_cache = false;  // save the slot's tokens and look for a better entry
  };

  std::optional<Choice> choose(std::span<const uint32_t> prompt) const;
  bool usesHostCache(const Choice& choice, bool use_host_cache) const {
    return choice.update_cache && use_host_cache && host_cache_.enabled();
  }

  SlotTableConfig config_;
  std::vector<Slot> slots_;
  HostPromptCache host_cache_;
  int64_t releases_ = 0;
};

}  // namespace prefixgate::sim
