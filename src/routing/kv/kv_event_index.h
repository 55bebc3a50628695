#pragma once
// The KV-event view of what each pod's engine holds in its prefix cache (KV event sync mode): the BlockStored,
// BlockRemoved and AllBlocksCleared events a pod publishes, re-hashed into the gateway's own chained block hashes
// and kept in two prefix indexes, one per tier (GPU blocks, and blocks offloaded to CPU memory).
//
// Re-hashing: a BlockStored carries the token ids of its blocks. They are packed as the remote tokenizer's ids are
// (4 bytes each, big-endian) and hashed with the gateway's chain and seed, in blocks of the engine's block size;
// the first block of an event chains to the gateway hash of its parent, found through the pod's map of engine
// hash -> gateway hash (a block with no parent starts from the seed). So nothing depends on the engine's hash
// function or its seed, and a request tokenized by the engine's /tokenize and hashed the same way matches. The
// same map applies a BlockRemoved to that pod alone.
//
// Separation: a block stored under a LoRA adapter is indexed under the adapter's name (what requests name as their
// model); a block with extra keys (multimodal inputs, cache salts) has them mixed into its hash, so it never
// matches a plain prompt; blocks of a KV cache group other than 0 (hybrid models' extra groups) and of a medium
// other than GPU or CPU are not indexed (counted). Models are told apart by a digest of their name mixed into each
// block's key, so no name is ever stored: a publisher cannot fill a registry of names. Each data-parallel rank of
// a pod is its own slot; a pod's match is the best of its ranks.
//
// Block sizes: each slot keeps the block size of its own events, so pods started with different --block-size
// values are each matched with a request hashed at their own size (match takes one set of hashes per size).
//
// Bounds (one publisher must not hurt the others): a slot holds at most its engine's KV capacity (else
// bounds.max_pod_blocks), its oldest blocks dropped first; when the whole index is full, room is made in a slot
// holding more than its share (the storing one first), never in a slot within its share; batches of undeclared
// data-parallel ranks, adapters beyond bounds.max_pod_adapters and over-long adapter names are refused; a clear or
// a reset removes the slot's own entries (bounded by its cap) and keeps its identity, so it leaves nothing behind.
// Every refusal is counted by reason (KvApplied::refused).
//
// Threads: one writer (the KV event subscriber's thread) calls apply/resetPod/removePod; match() and blockSizes()
// are called concurrently from the event loops.
#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/kv_event_decoder.h"
#include "index/prefix_index.h"
#include "prefixgate/types.h"

namespace prefixgate::routing {

// What one pod's publisher may make the gateway hold or spend (routing.prefix_cache.kv_event_*; why each default:
// docs/configuration.md, "KV event bounds"). The index applies the first three; KvSync hands the last two to the
// subscriber.
struct KvEventBounds {
  size_t max_pod_blocks = 65536;          // per rank and tier, when the engine reports no KV capacity
  size_t max_pod_adapters = 64;           // LoRA adapters a rank holds blocks of at once
  size_t max_adapter_name_bytes = 256;    // a longer adapter name is refused
  size_t replay_hold_bytes = 64u << 20;   // live messages held while a replay runs, per publisher
  size_t poll_round_bytes = 1u << 20;     // read from one socket per polling round (at least one message)
};

struct KvEventIndexOptions {
  size_t block_capacity = 200000;   // per tier, over all pods and models (routing.prefix_cache.block_number)
  double cpu_block_credit = 0.5;    // a CPU-tier block counts this much of a GPU block in a match
  uint64_t seed = 0;                // the gateway's block hash seed
  size_t shards = 64;
  KvEventBounds bounds;
};

// What the pod's spec and engine say about it, for its bounds.
struct KvPodLimits {
  uint32_t ranks = 1;            // its data_parallel_size: batches of other ranks are refused
  uint64_t capacity_tokens = 0;  // its KV cache over all ranks (pods file, else its metrics); 0 = unknown
};

// Why something a publisher sent was refused or dropped; the unit is each reason's own.
enum class KvRefusal : uint8_t {
  kRank,          // a batch from a data-parallel rank at or past the pod's data_parallel_size (batches)
  kAdapters,      // a BlockStored under an adapter past max_pod_adapters (events)
  kAdapterName,   // a BlockStored under an adapter name longer than max_adapter_name_bytes (events)
  kPodCapacity,   // blocks past the rank's capacity: its oldest were dropped (blocks)
  kIndexShare,    // blocks of a rank over its share of a full index: its oldest were dropped (blocks)
};
inline constexpr size_t kKvRefusalCount = 5;
// "rank", "adapters", "adapter_name", "pod_capacity", "index_share": metric labels.
std::string_view kvRefusalName(KvRefusal reason);

// What one apply() did, for the subscriber's metrics.
struct KvApplied {
  uint64_t blocks_stored = 0;
  uint64_t blocks_removed = 0;
  uint64_t clears = 0;
  uint64_t orphan_blocks = 0;    // stored under a parent this pod never announced: their hashes cannot be known
  uint64_t unknown_removals = 0; // removed blocks this pod never announced
  uint64_t ignored_blocks = 0;   // other KV cache groups, other media, malformed events
  uint64_t resets = 0;           // a rank's block size changed: what it held (in the old size) was forgotten
  std::array<uint64_t, kKvRefusalCount> refused{};  // indexed by KvRefusal
  uint64_t refusedFor(KvRefusal reason) const { return refused[static_cast<size_t>(reason)]; }
};

// A prompt's hashes cut at one engine block size (tokens; 0 = match every pod with them, whatever its size).
struct KvPromptHashes {
  uint32_t block_tokens = 0;
  std::span<const BlockHash> hashes;
};

class KvEventIndex {
 public:
  // `clock` must outlive the index.
  KvEventIndex(const KvEventIndexOptions& options, const Clock& clock);
  ~KvEventIndex();

  // Applies one batch from `pod`, whose engine serves `model` (blocks stored under a LoRA adapter go under its
  // name instead), within the pod's bounds. Writer thread only.
  KvApplied apply(PodId pod, std::string_view model, const engine::KvEventBatch& batch, const KvPodLimits& limits = {});
  // Forgets every block `pod` published, all ranks (a gap that cannot be replayed, a publisher restart): its
  // entries are removed one by one (at most its cap), its slots keep their ids. Writer thread only.
  void resetPod(PodId pod);
  // The pod left the set: like resetPod, and its slots are dropped. Writer thread only.
  void removePod(PodId pod);

  // For each candidate, the blocks of the prompt its engine holds from the start, each of its ranks matched with
  // the hashes of its own block size (a rank whose size has no entry in `prompts` matches nothing): GPU blocks
  // count one, CPU-tier blocks beyond them cpu_block_credit each (rounded down), converted to blocks of
  // prompts[0]'s size (rounded down); the best of the pod's ranks. Thread-safe.
  void match(std::string_view model, std::span<const KvPromptHashes> prompts, std::span<const PodId> candidates,
             std::span<uint32_t> matched_out) const;
  // The same with one set of hashes, every rank matched with them whatever its block size. Thread-safe.
  void match(std::string_view model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
             std::span<uint32_t> matched_out) const;

  // The block sizes (tokens) the candidates' events use, each with how many candidates use it, the most used first
  // (ties: the smaller size first); candidates with no event yet are left out. Thread-safe.
  void blockSizes(std::span<const PodId> candidates, std::vector<std::pair<uint32_t, uint32_t>>& out) const;

  const KvEventIndexOptions& options() const { return options_; }

  // For /debug, tests and the fuzz target; writer thread only. Blocks the pod holds now by its events (GPU tier,
  // all ranks); the models (its own and adapters) its ranks hold blocks of, summed over ranks; its block size
  // (0 = none yet); slots; blocks over all slots and tiers.
  size_t podBlocks(PodId pod) const;
  size_t podModels(PodId pod) const;
  uint32_t podBlockTokens(PodId pod) const;
  size_t slots() const { return slots_.size(); }
  size_t heldBlocks() const { return held_[kGpu] + held_[kCpu]; }
  // The tier indexes' entries and bytes (nothing may outlive the slots' maps: tests and the fuzz target check).
  size_t indexEntries() const;
  size_t indexMemoryBytes() const;

 private:
  enum Tier : uint8_t { kGpu = 0, kCpu = 1, kTiers = 2 };
  // One block a slot holds, by its engine hash.
  struct Held {
    BlockHash chain;  // the gateway's chain hash (what the next block's parent refers to)
    uint64_t model;   // the digest of its model's name (base or adapter)
    uint64_t order;   // when it was stored, in the slot's count: finds its place in TierBlocks::stored
  };
  struct TierBlocks {
    std::unordered_map<uint64_t, Held> blocks;
    // (engine hash, order), oldest first (an event's last block first, as engines evict); entries whose block was
    // removed or stored again are stale and skipped.
    std::deque<std::pair<uint64_t, uint64_t>> stored;
  };
  // One (pod, rank): its identity in the tier indexes, its blocks and the adapters they are stored under.
  struct Slot {
    PodId id;
    uint32_t block_tokens = 0;  // of its events; 0 until one was stored
    uint64_t next_order = 0;
    TierBlocks tiers[kTiers];
    std::unordered_map<uint64_t, size_t> models;  // model digest -> blocks held under it
    uint64_t share_evictions = 0;  // dropped to make room for another rank, reported with its own next batch
  };
  struct SlotTable;  // pod -> (slot id, block size), published copy-on-write for readers

  Slot& slotFor(PodId pod, uint32_t rank);
  void clearSlot(Slot& slot);
  void publishSlots();
  uint64_t modelDigest(std::string_view model) const;
  // Whether the rank may store blocks under the event's adapter (its digest in `digest`); counts a refusal.
  bool admitAdapter(Slot& slot, uint64_t base, const engine::KvBlockStored& event, uint64_t& digest,
                    KvApplied& applied);
  void store(Slot& slot, uint64_t model, const engine::KvBlockStored& event, size_t cap, KvApplied& applied);
  void remove(Slot& slot, const engine::KvBlockRemoved& event, KvApplied& applied);
  // Makes room for `incoming` blocks of `slot` in `tier`: within its cap, then within its share of a full tier.
  // Returns how many of them fit (the rest is refused).
  size_t makeRoom(Slot& slot, Tier tier, size_t incoming, size_t cap, KvApplied& applied);
  // Drops up to `count` of the slot's oldest blocks in `tier`; returns how many.
  size_t evictOldest(Slot& slot, Tier tier, size_t count);
  void forget(Slot& slot, Tier tier, std::unordered_map<uint64_t, Held>::iterator it);
  void compact(TierBlocks& tier);
  size_t capacityBlocks(const KvPodLimits& limits, uint32_t block_tokens) const;

  KvEventIndexOptions options_;
  std::unique_ptr<index::PrefixIndex> tiers_[kTiers];
  // Writer-side state.
  std::unordered_map<uint64_t, std::unique_ptr<Slot>> slots_;  // key: pod << 32 | rank
  uint32_t next_slot_ = 1;
  size_t held_[kTiers] = {0, 0};  // blocks over all slots (>= the tier index's entries)
  std::vector<uint8_t> packed_;
  std::vector<BlockHash> hashes_;
  std::vector<BlockHash> keys_;
  // Reader-side state.
  std::atomic<std::shared_ptr<const SlotTable>> table_;
};

}  // namespace prefixgate::routing
