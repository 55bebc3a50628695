#pragma once
// The engine's KV cache of prompt blocks with automatic prefix caching (pure: no sockets, no clocks).
//
// Capacity is counted in blocks. A block is either pinned (used by at least one running sequence, never evicted)
// or cached (resident, unused, evictable, kept in LRU order). Besides shared prompt blocks a running sequence
// holds private blocks (its partial last prompt block and its output), which count as used but are not cached.
// Usage, as vLLM reports it, is the used fraction: (pinned shared + private) / capacity.
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>

#include "engine_sim/block_hash.h"

namespace prefixgate::sim {

class PrefixCache {
 public:
  explicit PrefixCache(uint64_t capacity_blocks);

  // How many leading blocks are resident (pinned or cached), stopping at the first miss.
  size_t matchPrefix(std::span<const EngineBlockHash> blocks) const;

  // Whether pin(blocks, private_blocks) fits: used blocks plus what it adds stay within capacity (cached blocks
  // can always be evicted to make room).
  bool canPin(std::span<const EngineBlockHash> blocks, uint64_t private_blocks) const;

  // Pins one running sequence's blocks: resident ones stop being evictable, missing ones are inserted, evicting
  // least recently used cached blocks to make room. Returns false and changes nothing when !canPin.
  bool pin(std::span<const EngineBlockHash> blocks, uint64_t private_blocks);

  // Undoes one pin() with the same arguments. Blocks no sequence uses any more become cached and most recently
  // used, the first block last, so a prompt's tail is evicted before its head (vLLM frees in reverse order).
  void unpin(std::span<const EngineBlockHash> blocks, uint64_t private_blocks);

  bool contains(EngineBlockHash block) const { return entries_.count(block) != 0; }
  bool isPinned(EngineBlockHash block) const;
  uint64_t capacityBlocks() const { return capacity_blocks_; }
  // Blocks used by running sequences: pinned shared blocks plus private blocks.
  uint64_t usedBlocks() const { return pinned_shared_ + private_blocks_; }
  // Cached (unused, evictable) blocks.
  uint64_t evictableBlocks() const { return lru_.size(); }
  uint64_t residentBlocks() const { return usedBlocks() + evictableBlocks(); }
  uint64_t evictions() const { return evictions_; }
  // usedBlocks() / capacity, 0..1.
  double usage() const;

 private:
  struct Entry {
    uint32_t pins = 0;
    std::list<EngineBlockHash>::iterator lru_position;  // valid only while pins == 0
  };

  void evictUntil(uint64_t free_blocks_needed);

  uint64_t capacity_blocks_;
  uint64_t pinned_shared_ = 0;
  uint64_t private_blocks_ = 0;
  uint64_t evictions_ = 0;
  std::unordered_map<EngineBlockHash, Entry, EngineBlockHashHasher> entries_;
  std::list<EngineBlockHash> lru_;  // front = most recently used
};

}  // namespace prefixgate::sim
