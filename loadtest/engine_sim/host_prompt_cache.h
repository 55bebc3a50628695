#pragma once
// llama-server's host prompt cache (--cache-ram; server_prompt_cache in tools/server/server-task.cpp), bounded in
// tokens instead of bytes (pure: no sockets, no clocks). It keeps whole token sequences that slots held, oldest
// first; a slot about to be overwritten saves its sequence here, and a slot about to serve a prompt may take back
// (restore) the entry that fits the prompt better than what the slot holds. A restored entry leaves the cache (it
// lives in the slot again), so the order is least recently used first: saves append, evictions take the oldest.
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <vector>

namespace prefixgate::sim {

// The length of the longest common prefix of two token sequences (server_tokens::get_common_prefix).
size_t commonPrefix(std::span<const uint32_t> a, std::span<const uint32_t> b);

class HostPromptCache {
 public:
  // An entry shares at least this fraction of its own tokens with a prompt, or it is not restored for it (load:
  // "don't trash large prompts").
  static constexpr float kRestoreMinKeep = 0.25f;

  // limit_tokens 0 = the cache is off: nothing is saved.
  explicit HostPromptCache(uint64_t limit_tokens) : limit_tokens_(limit_tokens) {}

  // What saving a sequence would do (alloc, then update): nothing when it is empty, already held by an entry (a
  // prefix of it, or equal), or larger than the whole cache; else the entries it replaces (those that are
  // prefixes of it) and, to make room, the oldest others, by index (oldest first).
  struct SavePlan {
    bool save = false;
    std::vector<bool> dropped;  // by entry index; empty when nothing is dropped
  };
  SavePlan planSave(std::span<const uint32_t> tokens) const;
  // Saves a sequence as planSave() says; returns whether it was saved.
  bool save(std::span<const uint32_t> tokens);

  // load's choice for a slot holding `held` and a new `prompt`: the entry whose common prefix with the prompt is a
  // larger fraction both of the entry (f_keep, at least kRestoreMinKeep) and of the prompt (f_sim) than the slot's
  // own; the first (oldest) such entry that improves on the best so far wins. Entries marked in `dropped` (a save
  // planned before) are skipped. nullopt when none is better.
  std::optional<size_t> findBetter(std::span<const uint32_t> held, std::span<const uint32_t> prompt,
                                   const std::vector<bool>& dropped = {}) const;
  // Removes entry `index` and returns its tokens (restored into a slot).
  std::vector<uint32_t> take(size_t index);
  void clear();

  bool enabled() const { return limit_tokens_ > 0; }
  size_t size() const { return entries_.size(); }
  uint64_t tokens() const { return total_tokens_; }
  uint64_t limitTokens() const { return limit_tokens_; }
  // Entry `index`, oldest first.
  const std::vector<uint32_t>& entry(size_t index) const { return entries_[index]; }

 private:
  std::deque<std::vector<uint32_t>> entries_;  // oldest first
  uint64_t total_tokens_ = 0;
  uint64_t limit_tokens_;
};

}  // namespace prefixgate::sim
