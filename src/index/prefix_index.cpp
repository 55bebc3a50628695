#include "index/prefix_index.h"

#include <limits>

#include <algorithm>
#include <bit>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/adaptive_mutex.h"
#include "util/scratch.h"

namespace prefixgate::index {
namespace {

// match() and record() prefetch the nodes of the blocks this far ahead, and their table slots twice as far.
// Measured on a 1 MiB prompt whose blocks were out of cache: matching 2.5x faster than without prefetching;
// distances of 8 or 16 gained nothing more.
constexpr size_t kPrefetchDistance = 4;
// Ticks are 32 bits and ages are compared as unsigned differences, so an expiry must stay below 2^31 ticks.
constexpr uint64_t kMaxExpiryTicks = PrefixIndex::kMaxExpiry / PrefixIndex::kTouchTick;

constexpr uint32_t kNoCandidate = ~uint32_t{0};

// A pod id -> candidate position table over caller-provided storage, linear probing, never resized.
struct CandidateSlot {
  uint32_t pod;
  uint32_t position_plus_one;  // 0 = empty
};

class CandidateMap {
 public:
  explicit CandidateMap(std::span<CandidateSlot> slots) : slots_(slots), mask_(slots.size() - 1) {
    std::fill(slots_.begin(), slots_.end(), CandidateSlot{0, 0});
  }
  // Returns kNoCandidate after inserting, or the earlier position of a repeated pod.
  uint32_t insert(uint32_t pod, uint32_t position) {
    for (size_t i = home(pod);; i = (i + 1) & mask_) {
      if (slots_[i].position_plus_one == 0) {
        slots_[i] = CandidateSlot{pod, position + 1};
        return kNoCandidate;
      }
      if (slots_[i].pod == pod) return slots_[i].position_plus_one - 1;
    }
  }
  uint32_t find(uint32_t pod) const {
    for (size_t i = home(pod);; i = (i + 1) & mask_) {
      if (slots_[i].position_plus_one == 0) return kNoCandidate;
      if (slots_[i].pod == pod) return slots_[i].position_plus_one - 1;
    }
  }

 private:
  size_t home(uint32_t pod) const { return static_cast<size_t>((uint64_t{pod} * 0x9E3779B97F4A7C15ULL) >> 40) & mask_; }
  std::span<CandidateSlot> slots_;
  size_t mask_;
};

// At most half full, so probes stay short.
size_t candidateMapSize(size_t candidates) { return std::bit_ceil(std::max<size_t>(2 * candidates, 2)); }

template <class Fn>
void forEachBit(std::span<const uint64_t> words, Fn&& fn) {
  for (size_t w = 0; w < words.size(); ++w) {
    for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) fn(w * 64 + std::countr_zero(bits));
  }
}

[[noreturn]] void invalid(const std::string& field, const std::string& value, const std::string& reason) {
  throw std::invalid_argument("prefix index option " + field + " = " + value + ": " + reason);
}

size_t effectiveShards(const PrefixIndexOptions& options) {
  if (options.block_capacity == 0) invalid("block_capacity", "0", "must be at least 1");
  if (options.block_capacity > PrefixIndex::kMaxShards * size_t{BlockStore::kMaxBlocks}) {
    invalid("block_capacity", std::to_string(options.block_capacity),
            "must be at most " + std::to_string(PrefixIndex::kMaxShards * size_t{BlockStore::kMaxBlocks}));
  }
  if (options.shards == 0 || options.shards > PrefixIndex::kMaxShards) {
    invalid("shards", std::to_string(options.shards), "must be 1.." + std::to_string(PrefixIndex::kMaxShards));
  }
  size_t shards = std::bit_floor(options.shards);
  while (shards > 1 && options.block_capacity / shards < PrefixIndex::kMinBlocksPerShard) shards /= 2;
  while ((options.block_capacity + shards - 1) / shards > BlockStore::kMaxBlocks) shards *= 2;
  return shards;
}

Tick expiryTicks(std::chrono::nanoseconds expiry) {
  // Every age is at most the largest tick count: nothing ever counts as expired.
  if (expiry == PrefixIndex::kNeverExpire) return std::numeric_limits<Tick>::max();
  if (expiry <= std::chrono::nanoseconds::zero()) {
    invalid("expiry", std::to_string(expiry.count()) + "ns", "must be positive");
  }
  const auto tick = std::chrono::duration_cast<std::chrono::nanoseconds>(PrefixIndex::kTouchTick);
  const uint64_t ticks = static_cast<uint64_t>((expiry + tick - std::chrono::nanoseconds(1)) / tick);
  if (ticks > kMaxExpiryTicks) {
    invalid("expiry", std::to_string(expiry.count()) + "ns", "must be under 2^31 ticks of 10 ms (~248 days)");
  }
  return static_cast<Tick>(ticks);
}

Tick refreshTicks(const PrefixIndexOptions& options, Tick expiry_ticks) {
  const auto tick = std::chrono::duration_cast<std::chrono::nanoseconds>(PrefixIndex::kTouchTick);
  const std::chrono::nanoseconds interval = options.refresh_interval;
  if (interval < std::chrono::nanoseconds::zero() || (interval > std::chrono::nanoseconds::zero() &&
                                                      static_cast<uint64_t>(interval / tick) >= expiry_ticks)) {
    invalid("refresh_interval", std::to_string(interval.count()) + "ns", "must be 0 or shorter than the expiry");
  }
  return static_cast<Tick>(interval / tick);
}

}  // namespace

// One shard on its own cache lines, so that threads locking neighbouring shards do not contend on one line.
struct alignas(64) PrefixIndex::Shard {
  mutable util::AdaptiveMutex mutex;
  std::optional<BlockStore> store;
};

struct PrefixIndex::MatchBuffers {
  std::span<CandidateSlot> map;
  std::span<uint64_t> alive;  // candidates holding every block so far
  std::span<uint64_t> next;   // of those, the ones holding the current block
};

PrefixIndex::PrefixIndex(const PrefixIndexOptions& options, const Clock& clock)
    : clock_(clock),
      epoch_(clock.now()),
      expiry_ticks_(expiryTicks(options.expiry)),
      refresh_ticks_(refreshTicks(options, expiry_ticks_)),
      chains_provable_(options.chained && expiry_ticks_ <= static_cast<Tick>(std::numeric_limits<int32_t>::max())),
      block_capacity_(options.block_capacity),
      shard_count_(effectiveShards(options)),
      shards_(new Shard[shard_count_]) {
  for (size_t i = 0; i < shard_count_; ++i) {
    // Spread the remainder so the budgets add up to block_capacity exactly.
    const size_t budget = block_capacity_ / shard_count_ + (i < block_capacity_ % shard_count_ ? 1 : 0);
    shards_[i].store.emplace(static_cast<uint32_t>(budget), &removals_);
  }
}

PrefixIndex::~PrefixIndex() = default;

Tick PrefixIndex::nowTick() const {
  const auto elapsed = clock_.now() - epoch_;
  if (elapsed.count() <= 0) return 0;
  return static_cast<Tick>(static_cast<uint64_t>(elapsed / kTouchTick));  // wraps by design, see Tick
}

PrefixIndex::Shard& PrefixIndex::shardFor(uint64_t mixed) const { return shards_[mixed & (shard_count_ - 1)]; }

template <class Fn>
size_t PrefixIndex::forEachBlock(ModelKey model, std::span<const BlockHash> hashes, size_t first, Fn&& fn) const {
  // Two-stage prefetch: the table slot kSlotLead blocks ahead, then the node kNodeLead blocks ahead (by then
  // its slot is cached), so a long prompt keeps several cache misses in flight instead of one at a time.
  constexpr size_t kNodeLead = kPrefetchDistance;
  constexpr size_t kSlotLead = 2 * kPrefetchDistance;
  constexpr size_t kRing = 4 * kPrefetchDistance;  // mixed keys computed once, at the slot prefetch
  static_assert(kRing > kSlotLead && (kRing & (kRing - 1)) == 0);
  uint64_t mixed[kRing];
  const size_t n = hashes.size();
  if (first >= n) return n;
  const size_t steps = n - first;
  auto blockAt = [&](size_t step) { return first + step; };
  auto stageSlot = [&](size_t step) {
    const uint64_t m = mixBlockKey(hashes[blockAt(step)].value, model);
    mixed[step % kRing] = m;
    shardFor(m).store->prefetchSlot(m);
  };
  auto stageNode = [&](size_t step) {
    const uint64_t m = mixed[step % kRing];
    shardFor(m).store->prefetchNode(m);
  };
  for (size_t step = 0; step < std::min(steps, kSlotLead); ++step) stageSlot(step);
  for (size_t step = 0; step < std::min(steps, kNodeLead); ++step) stageNode(step);
  for (size_t step = 0; step < steps; ++step) {
    if (step + kSlotLead < steps) stageSlot(step + kSlotLead);
    if (step + kNodeLead < steps) stageNode(step + kNodeLead);
    const size_t index = blockAt(step);
    const uint64_t m = mixed[step % kRing];
    if (!fn(index, shardFor(m), BlockKey{hashes[index].value, m, model})) return index;
  }
  return n;
}

// The fresh entries of a prompt's first block, copied out while few.
struct PrefixIndex::FirstBlock {
  uint32_t pods[kFewHolders];
  Tick touches[kFewHolders];
  size_t count = 0;
  bool many = false;  // more than kFewHolders fresh entries
};

uint32_t PrefixIndex::match(std::string_view model, std::span<const BlockHash> hashes,
                            std::span<const PodId> candidates, std::span<uint32_t> matched_out,
                            std::optional<std::chrono::nanoseconds> max_age) const {
  const size_t count = std::min(candidates.size(), matched_out.size());
  candidates = candidates.first(count);
  matched_out = matched_out.first(count);
  std::fill(matched_out.begin(), matched_out.end(), 0u);
  if (count == 0 || hashes.empty()) return 0;
  const std::optional<ModelKey> model_key = models_.find(model);
  if (!model_key) return 0;  // never recorded: nothing to match, and a read must not register it

  const Liveness live = liveness(max_age);
  FirstBlock first;
  firstHolders(*model_key, hashes[0], live, first);
  if (first.count == 0) return 0;
  if (!first.many) return matchFew(*model_key, hashes, candidates, matched_out, first, live);
  return matchMany(*model_key, hashes, candidates, matched_out, live);
}

void PrefixIndex::firstHolders(ModelKey model, BlockHash block, const Liveness& live, FirstBlock& first) const {
  const BlockKey key = makeBlockKey(block, model);
  const Shard& shard = shardFor(key.mixed);
  std::lock_guard lock(shard.mutex);
  shard.store->visit(key, [&](const TouchEntry& e) {
    if (!live.fresh(e)) return;
    if (first.count < kFewHolders) {
      first.touches[first.count] = e.touch;
      first.pods[first.count++] = e.pod;
    } else {
      first.many = true;
    }
  });
}

bool PrefixIndex::holders(std::string_view model, std::span<const BlockHash> hashes,
                          std::vector<std::pair<PodId, uint32_t>>& out) const {
  out.clear();
  if (hashes.empty()) return true;
  const std::optional<ModelKey> model_key = models_.find(model);
  if (!model_key) return true;  // never recorded: nobody holds anything
  const Liveness live = liveness(std::nullopt);
  FirstBlock first;
  firstHolders(*model_key, hashes[0], live, first);
  if (first.many) return false;
  if (first.count == 0) return true;
  walkFew(*model_key, hashes, first, live, [&](uint32_t pod) { return !removed_.contains(PodId{pod}); },
          [&](uint32_t pod, uint32_t blocks) {
            if (blocks > 0) out.emplace_back(PodId{pod}, blocks);
          });
  return true;
}

namespace {

// Calls fn(position) for each candidate equal to `pod`. Compares eight at a time without branches, which the
// compiler turns into vector compares: with 1,000 candidates this scan is most of a short match.
template <class Fn>
void forEachPositionOf(std::span<const PodId> candidates, uint32_t pod, Fn&& fn) {
  constexpr size_t kLanes = 8;
  const size_t n = candidates.size();
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    uint32_t hits = 0;
    for (size_t k = 0; k < kLanes; ++k) hits |= static_cast<uint32_t>(candidates[i + k].value == pod) << k;
    for (; hits != 0; hits &= hits - 1) fn(i + std::countr_zero(hits));
  }
  for (; i < n; ++i) {
    if (candidates[i].value == pod) fn(i);
  }
}

// The last position of [known, n) where `holds` is true, given that it is true at `known` and that being true
// at a position makes it true at every earlier one: galloping from `known`, then bisecting, O(log n) calls.
template <class Pred>
size_t lastHeld(size_t known, size_t n, Pred&& holds) {
  size_t lo = known;  // holds(lo)
  size_t hi = n;      // the answer is below hi
  for (size_t step = 1; lo + step < hi; step *= 2) {
    if (!holds(lo + step)) {
      hi = lo + step;
      break;
    }
    lo += step;
  }
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (holds(mid) ? lo : hi) = mid;
  }
  return lo;
}

bool containsPod(std::span<const PodId> candidates, uint32_t pod) {
  bool found = false;
  forEachPositionOf(candidates, pod, [&](size_t) { found = true; });
  return found;
}

}  // namespace

uint32_t PrefixIndex::matchFew(ModelKey model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                               std::span<uint32_t> matched, const FirstBlock& first, const Liveness& live) const {
  return walkFew(
      model, hashes, first, live,
      [&](uint32_t pod) { return containsPod(candidates, pod) && !removed_.contains(PodId{pod}); },
      // Every position of a listed pod gets its count, so a repeated candidate gets the same one.
      [&](uint32_t pod, uint32_t blocks) { forEachPositionOf(candidates, pod, [&](size_t i) { matched[i] = blocks; }); });
}

template <class Accepts, class Emit>
uint32_t PrefixIndex::walkFew(ModelKey model, std::span<const BlockHash> hashes, const FirstBlock& first,
                              const Liveness& live, Accepts&& accepts, Emit&& emit) const {
  static_assert(kFewHolders <= 32, "alive set is a 32-bit mask");
  struct Listed {
    uint32_t pod;
    uint32_t matched;
    size_t proven;  // blocks [0, proven) are known held: no lookup needed there
  };
  Listed listed[kFewHolders];
  uint32_t listed_count = 0;
  for (size_t i = 0; i < first.count; ++i) {
    const uint32_t pod = first.pods[i];
    if (!accepts(pod)) continue;
    const size_t proven = provenBlocks(model, hashes, pod, first.touches[i], live);
    listed[listed_count++] = Listed{pod, 0, std::max<size_t>(1, proven)};  // the first block is held either way
  }
  if (listed_count == 0) return 0;

  uint32_t alive = (listed_count == 32) ? ~0u : (1u << listed_count) - 1;  // listed pods holding every block so far
  auto firstUnproven = [&] {
    size_t from = hashes.size();
    for (uint32_t bits = alive; bits != 0; bits &= bits - 1)
      from = std::min(from, listed[std::countr_zero(bits)].proven);
    return from;
  };
  // Block by block from the first block some pod still alive has not proven; a run of blocks every alive pod has
  // proven is jumped over (the walk restarts after it).
  size_t stop = hashes.size();
  for (size_t from = firstUnproven(); from < hashes.size();) {
    bool jumped = false;
    stop = forEachBlock(model, hashes, from, [&](size_t block, const Shard& shard, const BlockKey& key) {
      uint32_t holding = 0;
      uint32_t unproven = 0;
      for (uint32_t bits = alive; bits != 0; bits &= bits - 1) {
        const int j = std::countr_zero(bits);
        (block < listed[j].proven ? holding : unproven) |= 1u << j;
      }
      if (unproven == 0) {
        jumped = true;
        return false;
      }
      {
        std::lock_guard lock(shard.mutex);
        shard.store->visit(key, [&](const TouchEntry& e) {
          if (!live.fresh(e)) return;
          for (uint32_t bits = unproven; bits != 0; bits &= bits - 1) {
            const int j = std::countr_zero(bits);
            if (listed[j].pod == e.pod) holding |= 1u << j;
          }
        });
      }
      if (holding == 0) return false;
      for (uint32_t dropped = alive & ~holding; dropped != 0; dropped &= dropped - 1) {
        listed[std::countr_zero(dropped)].matched = static_cast<uint32_t>(block);
      }
      alive = holding;
      return true;
    });
    if (!jumped) break;
    from = firstUnproven();
    stop = hashes.size();
  }
  for (uint32_t bits = alive; bits != 0; bits &= bits - 1)
    listed[std::countr_zero(bits)].matched = static_cast<uint32_t>(stop);
  for (uint32_t j = 0; j < listed_count; ++j) emit(listed[j].pod, listed[j].matched);
  return static_cast<uint32_t>(stop);
}

bool PrefixIndex::freshEntry(ModelKey model, BlockHash block, uint32_t pod, const Liveness& live, Tick& touch) const {
  const BlockKey key = makeBlockKey(block, model);
  const Shard& shard = shardFor(key.mixed);
  bool found = false;
  std::lock_guard lock(shard.mutex);
  shard.store->visit(key, [&](const TouchEntry& e) {
    if (e.pod != pod || !live.fresh(e)) return;
    found = true;
    touch = e.touch;
  });
  return found;
}

size_t PrefixIndex::provenBlocks(ModelKey model, std::span<const BlockHash> hashes, uint32_t pod, Tick first_touch,
                                 const Liveness& live) const {
  if (!chains_provable_ || !removals_.newerThanRemovals(pod, first_touch)) return 0;
  // Proven at a block = held there in an entry newer than the pod's removals; that proves every earlier block
  // (RemovalTicks), so "proven" is true on a prefix of the blocks and can be bisected.
  return 1 + lastHeld(0, hashes.size(), [&](size_t k) {
           Tick touch = 0;
           return freshEntry(model, hashes[k], pod, live, touch) && removals_.newerThanRemovals(pod, touch);
         });
}

bool PrefixIndex::holds(std::string_view model, BlockHash block, PodId pod,
                        std::optional<std::chrono::nanoseconds> max_age) const {
  const std::optional<ModelKey> model_key = models_.find(model);
  Tick touch = 0;
  return model_key && !removed_.contains(pod) && freshEntry(*model_key, block, pod.value, liveness(max_age), touch);
}

uint32_t PrefixIndex::matchMany(ModelKey model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                                std::span<uint32_t> matched, const Liveness& live) const {
  const size_t count = candidates.size();
  const size_t words = (count + 63) / 64;
  const size_t map_size = candidateMapSize(count);
  if (count <= kInlineCandidates) {
    CandidateSlot map[2 * kInlineCandidates];
    uint64_t alive[1];
    uint64_t next[1];
    return walkMany(model, hashes, candidates, matched, live,
                    MatchBuffers{std::span(map, map_size), std::span(alive, words), std::span(next, words)});
  }
  // Past kInlineCandidates the buffers would make a large stack frame; one set per thread is kept instead.
  thread_local std::vector<CandidateSlot> map;
  thread_local std::vector<uint64_t> bits;
  if (map.size() < map_size) map.resize(map_size);
  if (bits.size() < 2 * words) bits.resize(2 * words);
  return walkMany(model, hashes, candidates, matched, live,
                  MatchBuffers{std::span(map).first(map_size), std::span(bits).first(words),
                               std::span(bits).subspan(words, words)});
}

uint32_t PrefixIndex::walkMany(ModelKey model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                               std::span<uint32_t> matched, const Liveness& live, const MatchBuffers& buffers) const {
  CandidateMap positions(buffers.map);
  std::span<uint64_t> alive = buffers.alive;
  std::span<uint64_t> next = buffers.next;
  std::fill(alive.begin(), alive.end(), 0);
  std::fill(next.begin(), next.end(), 0);

  // Removed pods are dropped here, once per call, so the per-entry loop below needs no tombstone lookups.
  uint32_t alive_count = 0;
  bool repeated = false;
  for (uint32_t i = 0; i < candidates.size(); ++i) {
    if (removed_.contains(candidates[i])) continue;
    if (positions.insert(candidates[i].value, i) != kNoCandidate) {
      repeated = true;
      continue;
    }
    alive[i / 64] |= uint64_t{1} << (i % 64);
    ++alive_count;
  }
  if (alive_count == 0) return 0;

  const size_t stop = forEachBlock(model, hashes, 0, [&](size_t block, const Shard& shard, const BlockKey& key) {
    uint32_t next_count = 0;
    {
      std::lock_guard lock(shard.mutex);
      shard.store->visit(key, [&](const TouchEntry& e) {
        if (!live.fresh(e)) return;
        const uint32_t c = positions.find(e.pod);
        if (c == kNoCandidate) return;
        const uint64_t bit = uint64_t{1} << (c % 64);
        if ((alive[c / 64] & bit) != 0 && (next[c / 64] & bit) == 0) {
          next[c / 64] |= bit;
          ++next_count;
        }
      });
    }
    if (next_count == 0) return false;
    if (next_count != alive_count) {
      // Candidates that held blocks [0, block) but not this one: their match ends here.
      for (size_t w = 0; w < alive.size(); ++w) alive[w] &= ~next[w];
      forEachBit(alive, [&](size_t c) { matched[c] = static_cast<uint32_t>(block); });
    }
    std::swap(alive, next);
    std::fill(next.begin(), next.end(), 0);
    alive_count = next_count;
    return true;
  });
  forEachBit(alive, [&](size_t c) { matched[c] = static_cast<uint32_t>(stop); });
  if (repeated) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      const uint32_t first = positions.find(candidates[i].value);
      if (first != kNoCandidate) matched[i] = matched[first];
    }
  }
  return static_cast<uint32_t>(stop);
}

Liveness PrefixIndex::liveness(std::optional<std::chrono::nanoseconds> max_age) const {
  Liveness live = liveness();
  if (max_age) {
    const auto ticks = std::max<int64_t>(0, max_age->count() / std::chrono::nanoseconds(kTouchTick).count());
    if (ticks < live.expiry_ticks) live.expiry_ticks = static_cast<Tick>(ticks);
  }
  return live;
}

size_t PrefixIndex::remove(std::string_view model, std::span<const BlockHash> hashes, PodId pod) {
  const std::optional<ModelKey> model_key = models_.find(model);
  if (!model_key) return 0;
  size_t removed = 0;
  const Liveness live = liveness();
  forEachBlock(*model_key, hashes, 0, [&](size_t, Shard& shard, const BlockKey& key) {
    std::lock_guard lock(shard.mutex);
    removed += shard.store->remove(key, pod.value, live) ? 1 : 0;
    return true;
  });
  return removed;
}

bool PrefixIndex::record(std::string_view model, std::span<const BlockHash> hashes, PodId pod, size_t* written) {
  if (written) *written = 0;
  if (removed_.contains(pod)) return false;
  const std::optional<ModelKey> model_key = models_.findOrAdd(model);
  if (!model_key) return false;
  // One prompt never takes more than half the index: a huge prompt keeps its head and cannot flush every model.
  hashes = hashes.first(std::min(hashes.size(), maxBlocksPerRecord()));
  const Liveness live = liveness();
  // The blocks the pod provably holds from a touch within the refresh interval are left as they are (with an
  // interval of 0, their entries already say "now" and their LRU places were taken this tick). Proven at block k
  // with touch t means every earlier block was touched at t or later (RemovalTicks), so "current" holds on a
  // prefix of the blocks and can be bisected; the last current block has the oldest touch of them.
  auto current = [&](size_t k, Tick& touch) {
    return freshEntry(*model_key, hashes[k], pod.value, live, touch) &&
           static_cast<Tick>(live.now - touch) <= refresh_ticks_ && removals_.newerThanRemovals(pod.value, touch);
  };
  Tick oldest = 0;
  size_t unchanged = 0;
  if (chains_provable_ && !hashes.empty() && current(0, oldest)) {
    unchanged = 1 + lastHeld(0, hashes.size(), [&](size_t k) { Tick t = 0; return current(k, t); });
    if (unchanged > 1) current(unchanged - 1, oldest);
  }
  writeBlocks(*model_key, hashes.subspan(unchanged), pod.value, live);
  // Those writes may have evicted one of the unchanged blocks (noted as a removal of a touch at least `oldest`):
  // write them too, as a record that skips nothing would have rewritten them at this point.
  if (unchanged > 0 && !removals_.newerThanRemovals(pod.value, oldest)) {
    writeBlocks(*model_key, hashes.first(unchanged), pod.value, live);
    unchanged = 0;
  }
  if (written) *written = hashes.size() - unchanged;
  return true;
}

void PrefixIndex::writeBlocks(ModelKey model, std::span<const BlockHash> hashes, uint32_t pod, const Liveness& live) {
  // Last block first within each shard (see the header: a prompt's head must outlive its tail in the LRU). Each
  // shard's LRU sees only its own blocks, so going shard by shard gives the same result as going block by block
  // over the whole prompt, with one lock per shard instead of one per block, and with each block's LRU
  // neighbours (the same prompt's blocks in that shard, from its previous record) the blocks just written.
  thread_local std::vector<uint64_t> mixed;
  thread_local std::vector<uint32_t> order;   // block positions, grouped by shard, last first within a shard
  thread_local std::vector<uint32_t> bounds;  // counting sort by shard: shard s's blocks start at bounds[s]
  const size_t n = hashes.size();
  mixed.resize(n);
  order.resize(n);
  bounds.assign(shard_count_ + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    mixed[i] = mixBlockKey(hashes[i].value, model);
    ++bounds[(mixed[i] & (shard_count_ - 1)) + 1];
  }
  for (size_t s = 0; s < shard_count_; ++s) bounds[s + 1] += bounds[s];
  for (size_t i = n; i-- > 0;) order[bounds[mixed[i] & (shard_count_ - 1)]++] = static_cast<uint32_t>(i);
  // One pass over all shards' blocks, prefetching as forEachBlock does (the slot kSlotLead blocks ahead, the
  // node kNodeLead ahead) across the shards' boundaries, and holding each shard's lock while on its blocks.
  constexpr size_t kNodeLead = kPrefetchDistance;
  constexpr size_t kSlotLead = 2 * kPrefetchDistance;
  auto storeOf = [&](size_t p) -> BlockStore& { return *shardFor(mixed[order[p]]).store; };
  for (size_t p = 0; p < std::min(n, kSlotLead); ++p) storeOf(p).prefetchSlot(mixed[order[p]]);
  for (size_t p = 0; p < std::min(n, kNodeLead); ++p) storeOf(p).prefetchNode(mixed[order[p]]);
  std::unique_lock<util::AdaptiveMutex> lock;
  for (size_t p = 0; p < n; ++p) {
    if (p + kSlotLead < n) storeOf(p + kSlotLead).prefetchSlot(mixed[order[p + kSlotLead]]);
    if (p + kNodeLead < n) storeOf(p + kNodeLead).prefetchNode(mixed[order[p + kNodeLead]]);
    const uint32_t i = order[p];
    Shard& shard = shardFor(mixed[i]);
    if (lock.mutex() != &shard.mutex) {  // one shard's lock at a time
      if (lock) lock.unlock();
      lock = std::unique_lock(shard.mutex);
    }
    shard.store->record(BlockKey{hashes[i].value, mixed[i], model}, pod, live);
  }
  util::releaseIfLarge(mixed);
  util::releaseIfLarge(order);
}

void PrefixIndex::removePod(PodId pod) { removed_.add(pod); }

size_t PrefixIndex::size() const {
  size_t total = 0;
  for (size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard lock(shards_[i].mutex);
    total += shards_[i].store->blocks();
  }
  return total;
}

size_t PrefixIndex::entryCount() const {
  size_t total = 0;
  for (size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard lock(shards_[i].mutex);
    total += shards_[i].store->entries();
  }
  return total;
}

size_t PrefixIndex::memoryBytes() const {
  size_t total = sizeof(*this) + shard_count_ * sizeof(Shard) + models_.memoryBytes() + removed_.memoryBytes();
  for (size_t i = 0; i < shard_count_; ++i) {
    std::lock_guard lock(shards_[i].mutex);
    total += shards_[i].store->memoryBytes() - sizeof(BlockStore);  // the store itself lives inside its Shard
  }
  return total;
}

double PrefixIndex::bytesPerEntryEstimate() const {
  const size_t entries = entryCount();
  return entries == 0 ? 0.0 : static_cast<double>(memoryBytes()) / static_cast<double>(entries);
}

}  // namespace prefixgate::index
