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
// other than GPU or CPU are not indexed (counted). Each data-parallel rank of a pod is its own slot; a pod's match
// is the best of its ranks.
//
// Threads: one writer (the KV event subscriber's thread) calls apply/resetPod/removePod; match() and blockTokens()
// are called concurrently from the event loops.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/kv_event_decoder.h"
#include "index/prefix_index.h"
#include "prefixgate/types.h"

namespace prefixgate::routing {

struct KvEventIndexOptions {
  size_t block_capacity = 200000;   // per tier, over all pods and models (routing.prefix_cache.block_number)
  double cpu_block_credit = 0.5;    // a CPU-tier block counts this much of a GPU block in a match
  uint64_t seed = 0;                // the gateway's block hash seed
  size_t shards = 64;
};

// What one apply() did, for the subscriber's metrics.
struct KvApplied {
  uint64_t blocks_stored = 0;
  uint64_t blocks_removed = 0;
  uint64_t clears = 0;
  uint64_t orphan_blocks = 0;    // stored under a parent this pod never announced: their hashes cannot be known
  uint64_t unknown_removals = 0; // removed blocks this pod never announced
  uint64_t ignored_blocks = 0;   // other KV cache groups, other media, malformed events
  uint64_t overflows = 0;        // a pod's view outgrew the index (block_capacity) and was forgotten
};

class KvEventIndex {
 public:
  // `clock` must outlive the index.
  KvEventIndex(const KvEventIndexOptions& options, const Clock& clock);
  ~KvEventIndex();

  // Applies one batch from `pod`, whose engine serves `model` (blocks stored under a LoRA adapter go under its
  // name instead). Writer thread only.
  KvApplied apply(PodId pod, std::string_view model, const engine::KvEventBatch& batch);
  // Forgets every block `pod` published, all ranks (a gap that cannot be replayed, a publisher restart). Its
  // blocks stop matching at once; their memory is reclaimed as the index is written. Writer thread only.
  void resetPod(PodId pod);
  // The pod left the set: like resetPod, and its slots are not reused. Writer thread only.
  void removePod(PodId pod);

  // For each candidate, the blocks of `hashes` its engine holds from the start: GPU blocks count one, CPU-tier
  // blocks beyond them cpu_block_credit each (rounded down); the best of the pod's ranks. Thread-safe.
  void match(std::string_view model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
             std::span<uint32_t> matched_out) const;

  // The engine block size (tokens) in the events of `model`'s pods; 0 until one arrived. Thread-safe.
  uint32_t blockTokens(std::string_view model) const;
  // Blocks the pod holds now by its events (GPU tier, all ranks). Writer thread only (for /debug and tests).
  size_t podBlocks(PodId pod) const;

 private:
  enum Tier : uint8_t { kGpu = 0, kCpu = 1, kTiers = 2 };
  struct Block {
    BlockHash hash;
    uint16_t model;  // index into models_
  };
  // One (pod, rank): its identity in the tier indexes and its engine hash -> gateway block maps.
  struct Slot {
    PodId id;
    std::unordered_map<uint64_t, Block> blocks[kTiers];
  };
  struct SlotTable;  // pod -> slot ids, published copy-on-write for readers

  Slot& slotFor(PodId pod, uint32_t rank);
  void clearSlot(Slot& slot);
  void publishSlots();
  uint16_t modelIndex(std::string_view model);
  void store(Slot& slot, uint16_t model, const engine::KvBlockStored& event, KvApplied& applied);
  void remove(Slot& slot, const engine::KvBlockRemoved& event, KvApplied& applied);

  KvEventIndexOptions options_;
  std::unique_ptr<index::PrefixIndex> tiers_[kTiers];
  // Writer-side state.
  std::unordered_map<uint64_t, std::unique_ptr<Slot>> slots_;  // key: pod << 32 | rank
  uint32_t next_slot_ = 1;
  std::vector<std::string> models_;
  std::vector<uint8_t> packed_;
  std::vector<BlockHash> hashes_;
  // Reader-side state.
  std::atomic<std::shared_ptr<const SlotTable>> table_;
  mutable std::mutex block_tokens_mutex_;
  std::unordered_map<std::string, uint32_t> block_tokens_;  // guarded by block_tokens_mutex_
};

}  // namespace prefixgate::routing
