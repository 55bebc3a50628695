#pragma once
// The prefix index of standard mode: for each model, which pods the gateway has routed each block to, and when.
// Pure data structure: no sockets, no timers, an injected clock. One instance serves every model; a model's
// blocks never match for another model.
//
// Cost per (block, pod) entry, measured by malloc over 1,000,000 blocks (tests/unit/index/
// prefix_index_memory_test.cpp): 46.6 bytes when each block is held by one pod, hash table and LRU links
// included; 15.5 bytes when held by three (pods two and three are inline, free); pods beyond three cost 8 bytes
// each in a spill list. The hash table is allocated for the full block_capacity up front (6 bytes per block).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "index/block_store.h"
#include "index/model_registry.h"
#include "index/pod_tombstones.h"
#include "index/removal_ticks.h"
#include "prefixgate/types.h"

namespace prefixgate::index {

struct PrefixIndexOptions {
  // Most blocks held at once, over all models (AIBRIX_PREFIX_CACHE_BLOCK_NUMBER). The budget is split evenly
  // over the shards and each shard evicts its own least recently updated block, which with uniformly spread
  // hashes approximates one global LRU; the total never exceeds this number.
  size_t block_capacity = 200000;
  // A (block, pod) entry not refreshed for this long stops matching (AIBRIX_PREFIX_CACHE_EVICTION_DURATION_MINS).
  // Resolution: kTouchTick. PrefixIndex::kNeverExpire: entries go only when removed or evicted by the LRU.
  std::chrono::nanoseconds expiry = std::chrono::minutes(20);
  // Lock shards; rounded down to a power of two and reduced so that each shard keeps at least
  // kMinBlocksPerShard blocks (small indexes get one shard and an exact LRU), raised when a shard would exceed
  // BlockStore::kMaxBlocks.
  size_t shards = 64;
  // The hashes given to match() and record() are chains: each block hash covers every block before it, as
  // index::hashBlocks makes them, so one hash always stands at the same position behind the same blocks. Lets
  // match() and record() prove a held prefix from its last block (see match) instead of visiting every block;
  // off, they visit every block (any list of hashes then gets the block-by-block answer).
  bool chained = false;
  // With `chained`: record() leaves alone the leading blocks the pod provably holds from a touch at most this old
  // (0: from the current tick only), so a hot prefix resent every few milliseconds is written once per interval
  // rather than once per request. The price: an entry may expire up to this much earlier than its last record
  // plus `expiry`, and keeps an LRU place up to this old. Must be shorter than `expiry`.
  std::chrono::nanoseconds refresh_interval{0};
};

class PrefixIndex {
 public:
  // Touch times are stored as 32-bit counts of this tick: expiry is exact to within one tick, blocks updated
  // within the same tick keep their LRU order, and counts wrap only after ~497 days.
  static constexpr std::chrono::milliseconds kTouchTick{10};
  static constexpr std::chrono::nanoseconds kNeverExpire = std::chrono::nanoseconds::max();
  // The longest expiry (2^31 - 1 ticks, ~248 days) and the largest capacity the index accepts.
  static constexpr std::chrono::milliseconds kMaxExpiry = kTouchTick * ((int64_t{1} << 31) - 1);
  static constexpr size_t kMinBlocksPerShard = 64;
  static constexpr size_t kMaxShards = 4096;
  // When at most this many pods hold a prompt's first block (the common case), match() follows them in a small
  // list on the stack and never builds a map of the candidates, whatever their number.
  static constexpr size_t kFewHolders = 16;
  // Otherwise it maps all candidates; up to this many on the stack, more in a per-thread buffer that is
  // allocated once and reused.
  static constexpr size_t kInlineCandidates = 64;

  // Throws std::invalid_argument naming the field when an option is out of range (start-up only). `clock`
  // must outlive the index.
  PrefixIndex(const PrefixIndexOptions& options, const Clock& clock);
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  // For each candidate pod, writes to matched_out[i] how many of `hashes` it holds from the start (its prefix
  // match in blocks). Expired entries, removed pods and unknown models match nothing. Returns the longest match.
  // Candidates should be distinct (a repeated pod gets the same count); matched_out must have candidates.size()
  // elements (extra candidates are ignored, extra outputs untouched).
  // How, with options.chained: when at most kFewHolders pods hold the first block (the common case), each is
  // searched on its own, galloping then bisecting for the last block it holds in an entry newer than its noted
  // removals (RemovalTicks: such an entry proves every block before it held), then walking on from there block
  // by block while an unproven entry may still extend it. A prompt recorded for a pod and matched again costs
  // O(log blocks) lookups per holder. Otherwise (and always without options.chained) it walks the blocks in
  // order keeping the candidates that hold every block so far, stopping at the first block none of them holds:
  // O(blocks walked x pods per block). Either way the answer is the block-by-block one, holds() asked of every
  // block (tests/unit/index/prefix_index_search_test.cpp checks it).
  // Thread-safe; a pure read: refreshes nothing. Allocates nothing, except once per thread for its first call
  // with more than kInlineCandidates candidates and a first block held by more than kFewHolders pods. Takes each
  // touched shard's lock briefly, one block at a time. Under concurrent records a match may count a block that
  // a record in progress has not yet written (it writes last to first) as held.
  // `max_age` (when shorter than the expiry) counts only entries touched within it: KV-event mode trusts the
  // gateway's own recent records for a moment, until the engine's events confirm them.
  uint32_t match(std::string_view model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                 std::span<uint32_t> matched_out,
                 std::optional<std::chrono::nanoseconds> max_age = std::nullopt) const;
  // The pods that hold a prefix of `hashes`, each with the number of leading blocks it holds (> 0), written to `out`
  // (cleared first; removed pods left out): what match() finds for them, without a candidate list, so the cost
  // follows the holders, not the fleet (routing's sampled decisions at large fleets). False, with `out` empty,
  // when more than kFewHolders pods hold the first block: match() over the candidates then.
  bool holders(std::string_view model, std::span<const BlockHash> hashes,
               std::vector<std::pair<PodId, uint32_t>>& out) const;

  // Marks `pod` as holding every block of `hashes` under `model`, touched now: new blocks are inserted (evicting
  // the least recently updated block of a full shard), known ones refreshed. Blocks are written last to first,
  // so a prompt's first blocks are its most recently updated and are evicted after its tail. With
  // options.chained, the leading blocks the pod provably holds from a touch within options.refresh_interval (this
  // very tick when 0; as match proves them) are found by a search and left as they are: a hot prefix routed many
  // times per interval is written once per interval, not once per request (dead entries of other pods on those
  // blocks wait for a later refresh or the sweep).
  // Writes go shard by shard, each shard's lock taken once for all its blocks of the prompt. Each call also
  // reclaims a bounded number of expired or removed entries in the shards it writes (never a full scan).
  // Returns false, storing nothing, when `pod` was removed or the model registry is full
  // (ModelRegistry::kMaxModels). Only the first maxBlocksPerRecord() blocks are recorded: one prompt larger than
  // the index would otherwise evict every model's blocks. `written` (when given) receives how many blocks were
  // written (0: every block was already held from a touch within the refresh interval). Thread-safe.
  bool record(std::string_view model, std::span<const BlockHash> hashes, PodId pod, size_t* written = nullptr);

  // Drops `pod` from each block of `hashes` (blocks nobody holds any more are freed). The KV-event index applies
  // an engine's BlockRemoved with it. Returns how many entries were removed. Thread-safe.
  size_t remove(std::string_view model, std::span<const BlockHash> hashes, PodId pod);

  // Removes `pod` from the index. Its entries stop matching before this returns (an O(1) check in match), and
  // their memory is reclaimed incrementally by later record() calls. Later record() calls for it are ignored.
  // Contract: the gateway never reuses a PodId after removing it, so the id is tombstoned for the life of the
  // index (8-16 bytes per removed pod). Thread-safe.
  void removePod(PodId pod);
  bool isRemoved(PodId pod) const { return removed_.contains(pod); }

  // Whether `pod` (not removed) holds `block` of `model` in an entry that has not expired (nor is older than
  // `max_age`, as in match): one block, one lookup. match() answers as if it asked this of every block in turn.
  // Thread-safe.
  bool holds(std::string_view model, BlockHash block, PodId pod,
             std::optional<std::chrono::nanoseconds> max_age = std::nullopt) const;

  // Blocks stored now, over all models. Includes expired blocks not yet reclaimed. Locks each shard in turn.
  size_t size() const;
  // (block, pod) entries stored now, including dead ones not yet reclaimed. Locks each shard in turn.
  size_t entryCount() const;
  // Bytes allocated by the index (shards' tables, nodes and spill lists, registries, tombstones).
  size_t memoryBytes() const;
  // memoryBytes() / entryCount() (0 when empty): the figure to compare with the 48-byte target.
  double bytesPerEntryEstimate() const;

  size_t shardCount() const { return shard_count_; }
  // Whether match() and record() search chains (options.chained with an expiry under 2^31 ticks).
  bool searchesChains() const { return chains_provable_; }
  // options.refresh_interval, in whole touch ticks.
  std::chrono::nanoseconds refreshInterval() const { return kTouchTick * refresh_ticks_; }
  size_t blockCapacity() const { return block_capacity_; }
  // Half the capacity (at least 1): the most blocks one record() stores.
  size_t maxBlocksPerRecord() const { return std::max<size_t>(1, block_capacity_ / 2); }

 private:
  struct Shard;
  // Per-call state of matchMany(): a pod -> candidate map and two bitsets over the candidates.
  struct MatchBuffers;
  struct FirstBlock;

  // Visits blocks [first, size) in order, prefetching the table slots and nodes of the blocks ahead; fn(index,
  // shard, key) does its own locking and returns false to stop. Returns the index where it stopped, or
  // hashes.size() after the last block. Shards are handed out mutable (they are owned through a pointer); only
  // remove() writes through them.
  template <class Fn>
  size_t forEachBlock(ModelKey model, std::span<const BlockHash> hashes, size_t first, Fn&& fn) const;
  // The two ways match() walks: with the few (<= kFewHolders) pods that hold the first block as a list, or,
  // when the first block is widely held, with a bitset over all candidates.
  uint32_t matchFew(ModelKey model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                    std::span<uint32_t> matched, const FirstBlock& first, const Liveness& live) const;
  // matchFew's walk over the pods of `first` for which accepts(pod) is true; emit(pod, blocks) once per such pod
  // at the end. Returns the blocks walked.
  template <class Accepts, class Emit>
  uint32_t walkFew(ModelKey model, std::span<const BlockHash> hashes, const FirstBlock& first, const Liveness& live,
                   Accepts&& accepts, Emit&& emit) const;
  // The fresh entries of the first block: up to kFewHolders pods with their touches, or `many`.
  void firstHolders(ModelKey model, BlockHash block, const Liveness& live, FirstBlock& first) const;
  uint32_t matchMany(ModelKey model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                     std::span<uint32_t> matched, const Liveness& live) const;
  uint32_t walkMany(ModelKey model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                    std::span<uint32_t> matched, const Liveness& live, const MatchBuffers& buffers) const;
  // Whether `pod` holds the block in an entry fresh by `live`; its touch in `touch`. Locks the block's shard.
  bool freshEntry(ModelKey model, BlockHash block, uint32_t pod, const Liveness& live, Tick& touch) const;
  // The number of blocks at the start of `hashes` that `pod` provably holds, given that it holds the first one
  // in an entry touched at `first_touch` (0 when that entry proves nothing).
  size_t provenBlocks(ModelKey model, std::span<const BlockHash> hashes, uint32_t pod, Tick first_touch,
                      const Liveness& live) const;
  // record()'s writes: marks `pod` as holding each block of `hashes`, shard by shard.
  void writeBlocks(ModelKey model, std::span<const BlockHash> hashes, uint32_t pod, const Liveness& live);
  Tick nowTick() const;
  Liveness liveness() const { return Liveness{nowTick(), expiry_ticks_, &removed_}; }
  Liveness liveness(std::optional<std::chrono::nanoseconds> max_age) const;
  Shard& shardFor(uint64_t mixed) const;

  const Clock& clock_;
  const SteadyTime epoch_;
  const Tick expiry_ticks_;
  const Tick refresh_ticks_;  // options.refresh_interval in whole ticks (rounded down)
  // options.chained, and an expiry under 2^31 ticks: removal ticks prove chains only while the ticks of fresh
  // entries compare exactly.
  const bool chains_provable_;
  const size_t block_capacity_;
  const size_t shard_count_;
  std::unique_ptr<Shard[]> shards_;
  ModelRegistry models_;
  PodTombstones removed_;
  RemovalTicks removals_;
};

}  // namespace prefixgate::index
