#pragma once
// The blocks of one shard of the prefix index: block -> small set of (pod, last touch), an LRU list by last
// update, and a fixed-size hash table. Single-threaded: PrefixIndex guards each BlockStore with its own mutex.
//
// Layout (why it is this compact): a block costs one 40-byte node (hash, packed LRU links/model/state, three
// inline (pod, touch) entries) plus 1.5 4-byte table slots (<= 67 % load), so a block held by one pod costs
// about 46 bytes. LRU links are 20-bit indices into a chunked slab, not pointers. Blocks held by more than
// three pods keep the extra entries in a per-shard spill list.
//
// The table is Robin Hood linear probing whose slots carry the probe distance and a 7-bit tag: lookups touch a
// node only on a tag match, and deletion shifts slots back without reading any node. It is sized once for the
// shard's block budget, so it never rehashes (no latency spikes) and its address never changes. Slots are
// written with relaxed atomic stores and the chunk directory is atomic, so that prefetchSlot()/prefetchNode()
// may peek without the lock (a stale peek only prefetches the wrong line); everything else needs the lock.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "index/model_registry.h"
#include "index/pod_tombstones.h"
#include "index/removal_ticks.h"
#include "prefixgate/types.h"

namespace prefixgate::index {


struct TouchEntry {
  uint32_t pod;  // PodId::value
  Tick touch;    // when the gateway last routed this block to the pod
};

// Decides whether an entry still counts: touched within the expiry and its pod not removed.
struct Liveness {
  Tick now;
  Tick expiry_ticks;
  const PodTombstones* removed;

  bool fresh(const TouchEntry& e) const { return static_cast<Tick>(now - e.touch) <= expiry_ticks; }
  bool live(const TouchEntry& e) const { return fresh(e) && !removed->contains(PodId{e.pod}); }
};

// A block hash under one model. `mixed` spreads both over 64 bits: its low bits pick the shard, its high bits
// the home slot, and its middle bits the tag.
struct BlockKey {
  uint64_t hash;
  uint64_t mixed;
  ModelKey model;
};

inline uint64_t mixBlockKey(uint64_t hash, ModelKey model) {
  // murmur3's finaliser over the hash xor a per-model constant: block hashes from tests are small integers, so
  // they must be mixed before their bits choose shards and slots.
  uint64_t x = hash ^ ((uint64_t{model} + 1) * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

inline BlockKey makeBlockKey(BlockHash hash, ModelKey model) {
  return BlockKey{hash.value, mixBlockKey(hash.value, model), model};
}

class BlockStore {
 public:
  // Node indices are 20 bits; a larger index uses more shards.
  static constexpr uint32_t kMaxBlocks = (1u << 20) - 1;
  // Bytes of one node, the per-block fixed cost besides its table slot.
  static constexpr size_t kNodeBytes = 40;

  // Holds at most `block_budget` blocks (1..kMaxBlocks); allocates the table now and nodes as they are used.
  // Entries that leave before they expire are noted in `removals` (when given; it must outlive the store).
  explicit BlockStore(uint32_t block_budget, RemovalTicks* removals = nullptr);
  ~BlockStore();
  BlockStore(const BlockStore&) = delete;
  BlockStore& operator=(const BlockStore&) = delete;

  // Calls fn(const TouchEntry&) for every stored entry of the block (live or not; the caller filters) and
  // returns true, or returns false when the block is absent. Reads only.
  template <class Fn>
  bool visit(const BlockKey& key, Fn&& fn) const;

  // Marks `pod` as holding the block with touch = live.now, inserting the block (evicting the least recently
  // updated one when the budget is full) or refreshing it. Dead entries met on the way are dropped, and a
  // bounded reclaim() follows every insert and every kRefreshesPerReclaim-th refresh. Returns false only when
  // the table has no slot within the probe limit for a new block (vanishingly rare; the block is then simply
  // not stored).
  bool record(const BlockKey& key, uint32_t pod, const Liveness& live);

  // Drops `pod`'s entry of the block, freeing the block when no entry is left. Returns whether there was one.
  // `live` decides whether the dropped entry was still fresh (then it is noted in the removals).
  bool remove(const BlockKey& key, uint32_t pod, const Liveness& live);

  // Bounded reclamation: frees up to `tail_checks` fully expired blocks at the LRU tail, and, while pods were
  // removed since the last full sweep, prunes up to `sweep_nodes` blocks at the sweep cursor (dropping the
  // removed pods' entries and freeing blocks left with none). Without removals the sweep costs nothing: expired
  // entries are dropped when their block is refreshed, or the whole block expires at the tail.
  void reclaim(const Liveness& live, uint32_t tail_checks, uint32_t sweep_nodes);

  // Cache hints for a coming lookup of `mixed`, safe without the shard's lock: first the slot it starts at,
  // then (once that slot is likely cached) the node it probably names.
  void prefetchSlot(uint64_t mixed) const { __builtin_prefetch(&slots_[homeOf(mixed)]); }
  void prefetchNode(uint64_t mixed) const;

  uint32_t blocks() const { return blocks_; }
  size_t entries() const { return entries_; }
  uint32_t budget() const { return budget_; }
  // Bytes this store has allocated (table, node chunks, spill lists), exact up to malloc's own overhead.
  size_t memoryBytes() const;

 private:
  static constexpr uint32_t kNil = kMaxBlocks;  // "no node" in a 20-bit link
  static constexpr uint32_t kInlineEntries = 3;
  static constexpr uint32_t kSpilled = 4;  // state: entries[0..1] inline, entries[2].pod = spill list id
  static constexpr uint32_t kFree = 15;    // state: node is on the free list

  struct Node {
    uint64_t hash;
    uint64_t prev : 20;  // toward the LRU head (more recent)
    uint64_t next : 20;  // toward the LRU tail; the free-list link while free
    uint64_t model : 16;
    uint64_t state : 4;  // 0..3 inline entry count, kSpilled or kFree
    uint64_t spare : 4;
    TouchEntry entries[kInlineEntries];
  };
  static_assert(sizeof(Node) == kNodeBytes, "node layout drives the memory budget");

  // Reclamation paired with writes: each insert may retire as many dead blocks as it adds (so the dead never
  // outgrow the live), while a refresh, which adds nothing, pays for it only now and then.
  static constexpr uint32_t kTailChecksPerWrite = 2;
  static constexpr uint32_t kSweepNodesPerWrite = 4;
  static constexpr uint32_t kRefreshesPerReclaim = 8;

  static constexpr uint32_t kChunkShift = 8;  // 256 nodes (10 KiB) per slab chunk
  static constexpr uint32_t kChunkNodes = 1u << kChunkShift;

  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };

  size_t homeOf(uint64_t mixed) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(mixed) * home_count_) >> 64);
  }
  Node* chunk(uint32_t index) const { return chunks_[index >> kChunkShift].load(std::memory_order_relaxed); }
  Node& node(uint32_t index) { return chunk(index)[index & (kChunkNodes - 1)]; }
  const Node& node(uint32_t index) const { return chunk(index)[index & (kChunkNodes - 1)]; }
  // Every slot write is atomic because prefetchNode() reads slots without the lock.
  void storeSlot(size_t pos, uint32_t value) {
    std::atomic_ref<uint32_t>(slots_[pos]).store(value, std::memory_order_relaxed);
  }

  bool findSlot(const BlockKey& key, size_t& pos) const;
  size_t slotOfNode(uint32_t index) const;
  bool tableInsert(uint64_t mixed, uint32_t index);
  void tableErase(size_t pos);

  uint32_t allocNode();
  void freeNode(uint32_t index, const Liveness& live);
  void lruUnlink(uint32_t index);
  void lruPushFront(uint32_t index);

  uint32_t entryCount(const Node& n) const;
  TouchEntry& entryAt(Node& n, uint32_t i);
  void appendEntry(Node& n, TouchEntry e);
  void removeEntryAt(Node& n, uint32_t i, const Liveness& live);
  void noteRemoved(const TouchEntry& e, const Liveness& live);
  uint32_t allocSpill();
  void releaseSpill(uint32_t id);
  void refresh(uint32_t index, uint32_t pod, const Liveness& live);
  bool prune(uint32_t index, const Liveness& live);         // true when the node was freed
  bool expired(const Node& n, const Liveness& live) const;  // every entry older than the expiry
  void sweep(const Liveness& live, uint32_t sweep_nodes);

  const uint32_t budget_;
  RemovalTicks* const removals_;
  const size_t home_count_;
  const size_t slot_count_;
  std::unique_ptr<uint32_t[], FreeDeleter> slots_;
  const size_t chunk_count_;
  std::unique_ptr<std::atomic<Node*>[]> chunks_;  // fixed directory, filled as the slab grows; owns the chunks
  uint32_t used_ = 0;                             // nodes ever handed out (high-water mark of the slab)
  uint32_t free_head_ = kNil;
  uint32_t lru_head_ = kNil;
  uint32_t lru_tail_ = kNil;
  uint32_t sweep_cursor_ = 0;
  size_t swept_removals_ = 0;  // tombstone count the last completed sweep covered
  size_t sweep_removals_ = 0;  // tombstone count the sweep in progress covers
  bool sweeping_ = false;
  uint32_t blocks_ = 0;
  uint32_t refreshes_ = 0;
  size_t entries_ = 0;
  std::vector<std::vector<TouchEntry>> spills_;
  std::vector<uint32_t> free_spills_;
};

template <class Fn>
bool BlockStore::visit(const BlockKey& key, Fn&& fn) const {
  size_t pos;
  if (!findSlot(key, pos)) return false;
  const Node& n = node((slots_[pos] & kNil) - 1);
  if (n.state != kSpilled) {
    for (uint32_t i = 0; i < n.state; ++i) fn(n.entries[i]);
  } else {
    fn(n.entries[0]);
    fn(n.entries[1]);
    for (const TouchEntry& e : spills_[n.entries[2].pod]) fn(e);
  }
  return true;
}

}  // namespace prefixgate::index
