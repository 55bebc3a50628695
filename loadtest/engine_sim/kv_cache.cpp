#include "engine_sim/kv_cache.h"

namespace prefixgate::sim {

KvCache::KvCache(uint64_t capacity_blocks) : blocks_(capacity_blocks) {
  // Every block starts free, in id order.
  for (BlockId id = 0; id < blocks_.size(); ++id) pushFreeBack(id);
}

size_t KvCache::longestHit(std::span<const EngineBlockHash> hashes) const {
  size_t hit = 0;
  while (hit < hashes.size() && by_hash_.count(hashes[hit]) != 0) ++hit;
  return hit;
}

uint64_t KvCache::freeAmong(std::span<const EngineBlockHash> hashes) const {
  uint64_t free = 0;
  for (EngineBlockHash hash : hashes) {
    auto it = by_hash_.find(hash);
    if (it != by_hash_.end() && blocks_[it->second].refs == 0) ++free;
  }
  return free;
}

void KvCache::acquireCached(std::span<const EngineBlockHash> hashes, std::vector<BlockId>& out) {
  for (EngineBlockHash hash : hashes) {
    auto it = by_hash_.find(hash);
    if (it == by_hash_.end()) return;  // callers pass a longestHit() prefix; never happens
    Block& block = blocks_[it->second];
    if (block.refs++ == 0) {
      unlinkFree(it->second);
      --cached_free_;
    }
    out.push_back(it->second);
  }
}

bool KvCache::allocate(uint64_t count, std::vector<BlockId>& out) {
  if (count > free_count_) return false;
  for (uint64_t i = 0; i < count; ++i) {
    BlockId id = free_head_;
    unlinkFree(id);
    forget(id);
    blocks_[id].refs = 1;
    out.push_back(id);
  }
  return true;
}

bool KvCache::registerBlock(BlockId id, EngineBlockHash hash) {
  Block& block = blocks_[id];
  if (block.registered || block.stand_in) return false;
  block.hash = hash;
  auto [it, inserted] = by_hash_.try_emplace(hash, id);
  if (inserted) {
    block.registered = true;
    return true;
  }
  block.stand_in = true;
  stand_ins_.emplace(hash, id);
  return false;
}

bool KvCache::reset() {
  if (usedBlocks() != 0) return false;
  for (Block& block : blocks_) block.registered = block.stand_in = false;
  by_hash_.clear();
  stand_ins_.clear();
  cached_free_ = 0;
  if (events_ != nullptr) events_->push_back(KvEvent{KvEvent::Kind::kCleared, {}, std::nullopt, {}});
  return true;
}

void KvCache::release(std::span<const BlockId> ids) {
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    Block& block = blocks_[*it];
    if (block.refs == 0 || --block.refs != 0) continue;
    pushFreeBack(*it);
    if (block.registered) ++cached_free_;
  }
}

double KvCache::usage() const {
  if (blocks_.empty()) return 0;
  return static_cast<double>(usedBlocks()) / static_cast<double>(blocks_.size());
}

void KvCache::unlinkFree(BlockId id) {
  Block& block = blocks_[id];
  (block.prev == kNone ? free_head_ : blocks_[block.prev].next) = block.next;
  (block.next == kNone ? free_tail_ : blocks_[block.next].prev) = block.prev;
  block.prev = block.next = kNone;
  --free_count_;
}

void KvCache::pushFreeBack(BlockId id) {
  Block& block = blocks_[id];
  block.prev = free_tail_;
  block.next = kNone;
  (free_tail_ == kNone ? free_head_ : blocks_[free_tail_].next) = id;
  free_tail_ = id;
  ++free_count_;
}

void KvCache::forget(BlockId id) {
  Block& block = blocks_[id];
  if (block.stand_in) {
    auto [first, last] = stand_ins_.equal_range(block.hash);
    for (auto it = first; it != last; ++it) {
      if (it->second != id) continue;
      stand_ins_.erase(it);
      break;
    }
    block.stand_in = false;
    return;
  }
  if (!block.registered) return;
  block.registered = false;
  --cached_free_;  // only free blocks are reused
  auto stand_in = stand_ins_.find(block.hash);
  if (stand_in == stand_ins_.end()) {
    by_hash_.erase(block.hash);
    ++evictions_;
    if (events_ != nullptr) {
      // Evictions of one allocation go out as one BlockRemoved.
      if (events_->empty() || events_->back().kind != KvEvent::Kind::kRemoved)
        events_->push_back(KvEvent{KvEvent::Kind::kRemoved, {}, std::nullopt, {}});
      events_->back().block_hashes.push_back(block.hash);
    }
    return;
  }
  // The same tokens live on in another block: it becomes the one found.
  Block& next = blocks_[stand_in->second];
  by_hash_[block.hash] = stand_in->second;
  next.stand_in = false;
  next.registered = true;
  if (next.refs == 0) ++cached_free_;
  stand_ins_.erase(stand_in);
}

}  // namespace prefixgate::sim
