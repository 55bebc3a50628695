#include "engine_sim/prefix_cache.h"

namespace prefixgate::sim {

PrefixCache::PrefixCache(uint64_t capacity_blocks) : capacity_blocks_(capacity_blocks) {}

size_t PrefixCache::matchPrefix(std::span<const EngineBlockHash> blocks) const {
  size_t matched = 0;
  while (matched < blocks.size() && contains(blocks[matched])) ++matched;
  return matched;
}

bool PrefixCache::isPinned(EngineBlockHash block) const {
  auto it = entries_.find(block);
  return it != entries_.end() && it->second.pins > 0;
}

bool PrefixCache::canPin(std::span<const EngineBlockHash> blocks, uint64_t private_blocks) const {
  uint64_t added = private_blocks;
  for (EngineBlockHash block : blocks)
    if (!isPinned(block)) ++added;
  return usedBlocks() + added <= capacity_blocks_;
}

bool PrefixCache::pin(std::span<const EngineBlockHash> blocks, uint64_t private_blocks) {
  if (!canPin(blocks, private_blocks)) return false;
  // Resident blocks first, so that making room for the missing ones never evicts a block this sequence needs.
  uint64_t missing = 0;
  for (EngineBlockHash block : blocks) {
    auto it = entries_.find(block);
    if (it == entries_.end()) {
      ++missing;
      continue;
    }
    if (it->second.pins++ == 0) {
      lru_.erase(it->second.lru_position);
      ++pinned_shared_;
    }
  }
  evictUntil(missing + private_blocks);
  private_blocks_ += private_blocks;
  for (EngineBlockHash block : blocks) {
    auto [it, inserted] = entries_.try_emplace(block);
    if (inserted) {
      it->second.pins = 1;
      ++pinned_shared_;
    }
  }
  return true;
}

void PrefixCache::unpin(std::span<const EngineBlockHash> blocks, uint64_t private_blocks) {
  private_blocks_ -= std::min(private_blocks, private_blocks_);
  for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) {
    auto it = entries_.find(*block);
    if (it == entries_.end() || it->second.pins == 0) continue;
    if (--it->second.pins == 0) {
      lru_.push_front(*block);
      it->second.lru_position = lru_.begin();
      --pinned_shared_;
    }
  }
}

double PrefixCache::usage() const {
  if (capacity_blocks_ == 0) return 0;
  return static_cast<double>(usedBlocks()) / static_cast<double>(capacity_blocks_);
}

void PrefixCache::evictUntil(uint64_t free_blocks_needed) {
  while (!lru_.empty() && residentBlocks() + free_blocks_needed > capacity_blocks_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
    ++evictions_;
  }
}

}  // namespace prefixgate::sim
