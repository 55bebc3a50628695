#pragma once
// The engine's paged KV cache with automatic prefix caching, as vLLM v1's block pool keeps it (pure: no sockets,
// no clocks).
//
// The cache is `capacity` blocks of block_size tokens. A block is in use while at least one running sequence
// references it; a block nobody references sits in the free queue, in eviction order (front first). A full block
// whose tokens were computed is registered under its chained hash and can be found by later prompts until it is
// reused for something else: freeing a sequence keeps its registered blocks findable (they are "cached" free
// blocks), and only allocating a fresh block evicts the cached block at the front of the free queue. A sequence
// frees its blocks last one first, so a prompt's tail is evicted before its head, as in vLLM.
// Usage, as vLLM reports it, is the referenced fraction: 1 - free / capacity.
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine_sim/block_hash.h"
#include "engine_sim/kv_events.h"

namespace prefixgate::sim {

using BlockId = uint32_t;

class KvCache {
 public:
  explicit KvCache(uint64_t capacity_blocks);

  // How many leading hashes are registered now (the cached prefix, in blocks). Reads only: nothing is touched.
  size_t longestHit(std::span<const EngineBlockHash> hashes) const;

  // Blocks that allocate() can hand out now: free ones, cached or not.
  uint64_t freeBlocks() const { return free_count_; }
  // Of the first `count` hashes' blocks (all registered), how many sit in the free queue: taking them with
  // acquireCached() lowers freeBlocks() by that much.
  uint64_t freeAmong(std::span<const EngineBlockHash> hashes) const;

  // References the registered blocks of `hashes` (all must be registered; see longestHit) and appends them to
  // `out`. A block taken out of the free queue is no longer evictable.
  void acquireCached(std::span<const EngineBlockHash> hashes, std::vector<BlockId>& out);
  // Takes `count` blocks from the front of the free queue, evicting the cached ones among them; appends them to
  // `out`. Returns false and changes nothing when fewer than `count` are free.
  bool allocate(uint64_t count, std::vector<BlockId>& out);
  // Registers a block (referenced, and now full of computed tokens) under its hash. When the hash already has a
  // block (another sequence computed the same tokens at the same time), the first one stays the one found and
  // this one is kept as its stand-in: when the first is evicted, the stand-in is found instead (vLLM keeps every
  // block of a hash).
  // Returns true when the hash became findable (false for a stand-in or a block registered before).
  bool registerBlock(BlockId block, EngineBlockHash hash);
  // Drops one reference to each block, last block first; blocks no longer referenced join the back of the free
  // queue (cached ones stay findable until evicted).
  void release(std::span<const BlockId> blocks);

  // Forgets every cached block (vLLM's reset_prefix_cache); refused (false) while any block is in use.
  bool reset();

  // Where BlockRemoved / AllBlocksCleared events go (null: none are made). Evictions append to it in order.
  void setEventLog(std::vector<KvEvent>* log) { events_ = log; }

  uint64_t capacityBlocks() const { return blocks_.size(); }
  uint64_t usedBlocks() const { return blocks_.size() - free_count_; }
  // Registered blocks that nobody references (evictable).
  uint64_t cachedFreeBlocks() const { return cached_free_; }
  uint64_t registeredBlocks() const { return by_hash_.size(); }
  uint64_t evictions() const { return evictions_; }
  // usedBlocks() / capacity, 0..1.
  double usage() const;

 private:
  static constexpr BlockId kNone = UINT32_MAX;
  struct Block {
    uint32_t refs = 0;
    bool registered = false;  // by_hash_ finds this block
    bool stand_in = false;    // holds the same tokens as the registered block of `hash` (in stand_ins_)
    EngineBlockHash hash{};
    BlockId prev = kNone;  // free queue links; valid while refs == 0
    BlockId next = kNone;
  };

  void unlinkFree(BlockId id);
  void pushFreeBack(BlockId id);
  // Forgets what a block held before it is reused.
  void forget(BlockId id);

  std::vector<Block> blocks_;
  std::unordered_map<EngineBlockHash, BlockId, EngineBlockHashHasher> by_hash_;
  std::unordered_multimap<EngineBlockHash, BlockId, EngineBlockHashHasher> stand_ins_;
  BlockId free_head_ = kNone;
  BlockId free_tail_ = kNone;
  uint64_t free_count_ = 0;
  uint64_t cached_free_ = 0;
  uint64_t evictions_ = 0;
  std::vector<KvEvent>* events_ = nullptr;
};

}  // namespace prefixgate::sim
