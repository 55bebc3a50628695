#pragma once
// Capacity-aware standard mode: which blocks the gateway routed to each pod, least recently routed first, bounded
// per pod by what that pod's KV cache can hold. An engine evicts its least recently used blocks when its cache is
// full and can never hold more than its capacity, so when the blocks routed to a pod exceed that capacity, the
// oldest of them are gone from the engine: they are handed back to be removed from the prefix index for that pod,
// and the index stops promising hits the engine can no longer give.
//
// Engines that keep whole prompts in a few slots instead of paged blocks (llama.cpp's server: one sequence per
// slot, reused by the next request that shares its prefix, else the least recently used one is overwritten) are
// modelled by touchSlots: a pod holds at most `slots` prompts.
//
// Pure data structure (no sockets; times from an injected Clock). Thread-safe: each pod has its own lock, taken once
// per call.
// Memory: about 90 bytes per (block, pod) entry (a hash-map node and a list node), on top of the index's own.
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::index {

class PodBlockLedger {
 public:
  // `clock` (must outlive the ledger) times how long a slot's request has been served; null = no times (0).
  explicit PodBlockLedger(const Clock* clock = nullptr) : clock_(clock) {}

  // A request that waits (at the gateway) for a busy slot holding its prefix instead of taking an idle one that does
  // not (touchSlots' `turn`). Its turn comes when the requests queued in that slot before it have ended: ready() is
  // then called once, without the ledger's locks, on the thread that released the slot (or removed the pod).
  class SlotTurn {
   public:
    virtual ~SlotTurn() = default;
    virtual void ready() = 0;
  };
  struct Evicted {
    std::string model;
    std::vector<BlockHash> hashes;  // oldest first
  };

  // Notes that `pod` was just routed `hashes` of `model` (the request's blocks, first to last). When the pod then
  // holds more than `capacity_blocks`, its least recently routed blocks beyond the capacity are removed from the
  // ledger and appended to `evicted` (one entry per model). A prompt's last block counts as older than its first,
  // as engines free a sequence's tail first. capacity_blocks 0 = unknown: nothing is evicted.
  void touch(PodId pod, std::string_view model, std::span<const BlockHash> hashes, size_t capacity_blocks,
             std::vector<Evicted>& evicted);
  // Slot engines: notes that `pod`, which keeps `slots` prompts, was just routed `hashes` of `model`. The prompt
  // takes the idle slot holding the longest prefix of it (over a tenth of it: the engine reuses that one), else an
  // empty slot, else the least recently used idle one (with every slot busy the engine makes the request wait: it
  // takes the first slot to free, taken to be the one busy the longest); the blocks of the prompt it replaces that no other slot holds are
  // appended to `evicted`. With `busy_slot` the chosen slot is busy (serving the request) until releaseSlot(pod,
  // *busy_slot), and a busy slot is never chosen while one is idle: two requests of one prefix at once take two
  // slots, as the engine does. Returns false (and nothing is modelled) for slots 0.
  // With `turn` (and `busy_slot`) the request may wait for its slot: when a busy slot holds a longer prefix of it
  // (over a tenth) than the slot the rules above choose, it takes that busy slot instead, queued behind the
  // requests busy there (`*queued` set true; `turn` is told when they have ended, see SlotTurn). The ledger keeps
  // `turn` weakly: a request that stops waiting just lets it go.
  // `expected_s` (with `busy_slot`): how long the request is expected to be served once it has its slot (-1 =
  // unknown), what slotPrefix reports while it is served or waits.
  bool touchSlots(PodId pod, std::string_view model, std::span<const BlockHash> hashes, size_t slots,
                  std::vector<Evicted>& evicted, uint64_t* busy_slot = nullptr,
                  const std::shared_ptr<SlotTurn>& turn = nullptr, bool* queued = nullptr, double expected_s = -1);
  // The request touchSlots marked `slot` busy for has ended (or never reached it): the next request queued for the
  // slot, if any, gets its turn (and is served from now on). A slot that is gone (the pod left, fewer slots) is
  // ignored.
  void releaseSlot(PodId pod, uint64_t slot);
  // What `pod`'s slots (it keeps `slots` prompts) hold of `hashes` (of `model`) now, in blocks. `idle`: what a new
  // request would find cached: the longest prefix an idle slot holds when it is over a tenth of the prompt (the
  // engine takes that slot), else 0; with every slot busy, what the first to free holds (the request waits for
  // it). `any`: the longest prefix any slot holds, busy or not. `queued`: when a busy slot holds a longer prefix
  // than `idle` (over a tenth of the prompt: what touchSlots with a turn would queue the request for), that prefix,
  // and `ahead` the requests busy in that slot (serving or queued); else 0 and 0. With `queued`, what is known of
  // the time they take: the one served there has been for `serving_s` (by the clock; 0 without one) and was
  // expected to take `serving_expected_s` (-1 = unknown); the others (those waiting for it) are expected to take
  // `waiting_expected_s` together, besides `waiting_unknown` of them whose time is unknown.
  struct SlotPrefixes {
    size_t idle = 0;
    size_t any = 0;
    size_t queued = 0;
    uint32_t ahead = 0;
    double serving_s = 0;
    double serving_expected_s = -1;
    double waiting_expected_s = 0;
    uint32_t waiting_unknown = 0;
  };
  // nullopt when the pod's slots are not modelled (nothing routed to it yet).
  std::optional<SlotPrefixes> slotPrefix(PodId pod, std::string_view model, std::span<const BlockHash> hashes,
                                         size_t slots) const;
  // Forgets `hashes` of `model` on `pod` (paged engines: blocks touch noted that the engine never computed, as its
  // request failed first), so that they no longer count against its capacity.
  void forget(PodId pod, std::string_view model, std::span<const BlockHash> hashes);
  // Forgets the pod (it left the set).
  void removePod(PodId pod);
  // Blocks the ledger holds for `pod` now.
  size_t blocks(PodId pod) const;

 private:
  struct Key {
    uint64_t hash;
    uint32_t model;
    bool operator==(const Key&) const = default;
  };
  struct KeyHasher {
    size_t operator()(const Key& k) const noexcept { return static_cast<size_t>(k.hash ^ (uint64_t{k.model} << 48)); }
  };
  struct Slot {
    uint64_t id = 0;  // never reused within a pod (releaseSlot finds its slot by it)
    uint32_t model = 0;
    std::vector<uint64_t> hashes;  // the prompt it holds, first block first
    uint64_t last_use = 0;
    uint32_t busy = 0;  // requests it is serving, and requests waiting for it (touchSlots' turn)
    // Those waiting, first in first out, with the time each is expected to be served (-1 = unknown).
    struct Waiting {
      std::weak_ptr<SlotTurn> turn;
      double expected_s = -1;
    };
    std::deque<Waiting> waiting;
    SteadyTime serving_since{};     // since when the request it serves (the first busy) has been served
    double serving_expected_s = -1;  // how long that one is expected to take; -1 = unknown
  };
  struct PodBlocks {
    mutable std::mutex mutex;
    std::list<Key> order;  // front = most recently routed
    std::unordered_map<Key, std::list<Key>::iterator, KeyHasher> where;
    std::vector<Slot> slots;  // touchSlots' model (empty for paged engines)
    uint64_t uses = 0;        // touchSlots calls, the slots' clock
  };
  void appendEvicted(std::span<const Key> dropped, std::vector<Evicted>& evicted);
  // With every one of `slots` slots busy, the one a waiting request will take: the one busy the longest; null
  // while one is idle (or empty). Under the pod's lock.
  static const Slot* firstToFree(const PodBlocks& blocks, size_t slots);
  // The index in blocks.slots of the busy slot holding the longest prefix of `hashes` when that prefix is over a
  // tenth of the prompt and longer than `than` blocks; kNone otherwise. Under the pod's lock.
  static constexpr size_t kNone = static_cast<size_t>(-1);
  static size_t busyHolder(const PodBlocks& blocks, uint32_t model_id, std::span<const BlockHash> hashes, size_t than);
  // Moves the turns still waiting in `slot` into `out` (it is gone: they wait for nothing). Under the pod's lock.
  static void takeWaiting(Slot& slot, std::vector<std::shared_ptr<SlotTurn>>& out);

  // The pod's entry, kept alive by the caller while a concurrent removePod drops it from the map.
  std::shared_ptr<PodBlocks> podBlocks(PodId pod);
  std::shared_ptr<PodBlocks> findPod(PodId pod) const;  // null when the pod has none
  uint32_t modelId(std::string_view model);

  SteadyTime now() const { return clock_ ? clock_->now() : SteadyTime{}; }

  const Clock* clock_;
  mutable std::mutex pods_mutex_;  // guards pods_ and models_ (not the per-pod contents)
  std::unordered_map<uint32_t, std::shared_ptr<PodBlocks>> pods_;
  std::vector<std::string> models_;
};

}  // namespace prefixgate::index
