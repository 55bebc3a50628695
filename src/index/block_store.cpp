#include "index/block_store.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

namespace prefixgate::index {
namespace {

// Slot = tag (7 bits) | probe distance (5 bits) | node index + 1 (20 bits); 0 = empty.
constexpr uint32_t kIndexMask = (1u << 20) - 1;
constexpr uint32_t kDistShift = 20;
constexpr uint32_t kDistOne = 1u << kDistShift;
constexpr uint32_t kMaxDist = 31;
constexpr uint32_t kTagShift = 25;
// Home slots per block of budget: a 3/2 ratio keeps the table at or under 67 % load. Against 5/4 (80 %), one more
// byte per block buys shorter Robin Hood runs for every lookup, insert and erase: 6-8 % fewer instructions per
// warm 8 KiB routing decision (docs/benchmarks.md, "The decision's profile").
constexpr size_t kHomeSlotsNum = 3;
constexpr size_t kHomeSlotsDen = 2;
constexpr size_t kMinHomeSlots = 8;
// Spill lists larger than this give their memory back when freed instead of being kept for reuse.
constexpr size_t kKeptSpillCapacity = 8;

inline uint32_t slotIndex(uint32_t slot) { return (slot & kIndexMask) - 1; }
inline uint32_t slotDist(uint32_t slot) { return (slot >> kDistShift) & kMaxDist; }
inline uint32_t slotTag(uint32_t slot) { return slot >> kTagShift; }
inline uint32_t tagOf(uint64_t mixed) { return static_cast<uint32_t>(mixed >> 20) & 0x7F; }
inline uint32_t makeSlot(uint32_t index, uint32_t dist, uint32_t tag) {
  return (tag << kTagShift) | (dist << kDistShift) | (index + 1);
}

}  // namespace

BlockStore::BlockStore(uint32_t block_budget, RemovalTicks* removals)
    : budget_(std::clamp<uint32_t>(block_budget, 1, kMaxBlocks)),
      removals_(removals),
      home_count_(std::max(kMinHomeSlots, static_cast<size_t>(budget_) * kHomeSlotsNum / kHomeSlotsDen)),
      // kMaxDist + 1 slots past the last home slot: probes never wrap, and the very last slot stays empty as a
      // sentinel for the backward shift.
      slot_count_(home_count_ + kMaxDist + 1),
      // calloc: large tables get lazily committed zero pages instead of being written once up front.
      slots_(static_cast<uint32_t*>(std::calloc(slot_count_, sizeof(uint32_t)))),
      chunk_count_((budget_ + kChunkNodes - 1) / kChunkNodes),
      chunks_(new std::atomic<Node*>[chunk_count_]) {
  if (!slots_) throw std::bad_alloc();
  for (size_t i = 0; i < chunk_count_; ++i) chunks_[i].store(nullptr, std::memory_order_relaxed);
}

BlockStore::~BlockStore() {
  for (size_t i = 0; i < chunk_count_; ++i) delete[] chunks_[i].load(std::memory_order_relaxed);
}

void BlockStore::prefetchNode(uint64_t mixed) const {
  // A lock-free peek at the first slots of the probe sequence (their line was prefetched earlier). It may race
  // with a writer and name the wrong node; that costs one useless prefetch, never a wrong answer.
  const uint32_t tag = tagOf(mixed);
  const size_t home = homeOf(mixed);
  constexpr uint32_t kPeekedSlots = 4;
  for (uint32_t d = 0; d < kPeekedSlots; ++d) {
    const uint32_t slot = std::atomic_ref<uint32_t>(slots_[home + d]).load(std::memory_order_relaxed);
    if (slot == 0 || slotDist(slot) < d) return;
    if (slotDist(slot) == d && slotTag(slot) == tag) {
      const uint32_t index = slotIndex(slot);
      if (const Node* base = chunk(index)) {
        // A 40-byte node straddles two cache lines half the time: fetch both ends.
        const char* at = reinterpret_cast<const char*>(base + (index & (kChunkNodes - 1)));
        __builtin_prefetch(at);
        __builtin_prefetch(at + sizeof(Node) - 1);
      }
      return;
    }
  }
}

bool BlockStore::findSlot(const BlockKey& key, size_t& pos) const {
  const uint32_t tag = tagOf(key.mixed);
  size_t p = homeOf(key.mixed);
  for (uint32_t d = 0; d <= kMaxDist; ++d, ++p) {
    const uint32_t slot = slots_[p];
    if (slot == 0) return false;
    const uint32_t dist = slotDist(slot);
    // Robin Hood order: once slots belong to keys homed after ours, ours cannot be further on.
    if (dist < d) return false;
    if (dist == d && slotTag(slot) == tag) {
      const Node& n = node(slotIndex(slot));
      if (n.hash == key.hash && n.model == key.model) {
        pos = p;
        return true;
      }
    }
  }
  return false;
}

size_t BlockStore::slotOfNode(uint32_t index) const {
  const Node& n = node(index);
  size_t p = homeOf(mixBlockKey(n.hash, static_cast<ModelKey>(n.model)));
  const uint32_t want = index + 1;
  while ((slots_[p] & kIndexMask) != want) ++p;  // present by invariant, within kMaxDist of its home
  return p;
}

bool BlockStore::tableInsert(uint64_t mixed, uint32_t index) {
  size_t p = homeOf(mixed);
  uint32_t d = 0;
  // Skip the keys homed at or before ours; the new key goes in front of the first key homed after it.
  while (slots_[p] != 0 && slotDist(slots_[p]) >= d) {
    ++p;
    if (++d > kMaxDist) return false;
  }
  size_t end = p;
  while (slots_[end] != 0) {
    if (slotDist(slots_[end]) == kMaxDist) return false;  // shifting it would exceed the probe limit
    ++end;
  }
  if (end >= slot_count_ - 1) return false;
  for (size_t q = end; q > p; --q) storeSlot(q, slots_[q - 1] + kDistOne);
  storeSlot(p, makeSlot(index, d, tagOf(mixed)));
  return true;
}

void BlockStore::tableErase(size_t pos) {
  // Backward shift: later keys of the run move one slot toward home, so no tombstones are ever needed.
  size_t q = pos;
  for (;;) {
    const uint32_t next = slots_[q + 1];
    if (next == 0 || slotDist(next) == 0) break;
    storeSlot(q, next - kDistOne);
    ++q;
  }
  storeSlot(q, 0);
}

uint32_t BlockStore::allocNode() {
  if (free_head_ != kNil) {
    const uint32_t index = free_head_;
    free_head_ = static_cast<uint32_t>(node(index).next);
    return index;
  }
  if ((used_ & (kChunkNodes - 1)) == 0) {
    chunks_[used_ >> kChunkShift].store(new Node[kChunkNodes](), std::memory_order_relaxed);
  }
  return used_++;
}

void BlockStore::noteRemoved(const TouchEntry& e, const Liveness& live) {
  // An expired entry's chain has expired with it (its later blocks were touched no later): nothing to note.
  // Signed age: an entry touched by another thread after this one read the clock is not expired.
  const bool expired = live.expiry_ticks <= static_cast<Tick>(std::numeric_limits<int32_t>::max()) &&
                       static_cast<int32_t>(live.now - e.touch) > static_cast<int32_t>(live.expiry_ticks);
  if (removals_ && !expired) removals_->note(e.pod, e.touch);
}

void BlockStore::freeNode(uint32_t index, const Liveness& live) {
  Node& n = node(index);
  if (removals_) {
    for (uint32_t i = 0; i < entryCount(n); ++i) noteRemoved(entryAt(n, i), live);
  }
  tableErase(slotOfNode(index));
  lruUnlink(index);
  entries_ -= entryCount(n);
  if (n.state == kSpilled) releaseSpill(n.entries[2].pod);
  n.state = kFree;
  n.next = free_head_;
  free_head_ = index;
  --blocks_;
}

void BlockStore::lruUnlink(uint32_t index) {
  Node& n = node(index);
  if (n.prev != kNil) {
    node(static_cast<uint32_t>(n.prev)).next = n.next;
  } else {
    lru_head_ = static_cast<uint32_t>(n.next);
  }
  if (n.next != kNil) {
    node(static_cast<uint32_t>(n.next)).prev = n.prev;
  } else {
    lru_tail_ = static_cast<uint32_t>(n.prev);
  }
}

void BlockStore::lruPushFront(uint32_t index) {
  Node& n = node(index);
  n.prev = kNil;
  n.next = lru_head_;
  if (lru_head_ != kNil) {
    node(lru_head_).prev = index;
  } else {
    lru_tail_ = index;
  }
  lru_head_ = index;
}

uint32_t BlockStore::entryCount(const Node& n) const {
  if (n.state == kSpilled) return 2 + static_cast<uint32_t>(spills_[n.entries[2].pod].size());
  return n.state == kFree ? 0 : static_cast<uint32_t>(n.state);
}

TouchEntry& BlockStore::entryAt(Node& n, uint32_t i) {
  if (n.state != kSpilled || i < 2) return n.entries[i];
  return spills_[n.entries[2].pod][i - 2];
}

void BlockStore::appendEntry(Node& n, TouchEntry e) {
  ++entries_;
  if (n.state < kInlineEntries) {
    n.entries[n.state] = e;
    n.state = n.state + 1;
    return;
  }
  if (n.state == kInlineEntries) {
    const uint32_t id = allocSpill();
    spills_[id].push_back(n.entries[2]);
    spills_[id].push_back(e);
    n.entries[2] = TouchEntry{id, 0};
    n.state = kSpilled;
    return;
  }
  spills_[n.entries[2].pod].push_back(e);
}

void BlockStore::removeEntryAt(Node& n, uint32_t i, const Liveness& live) {
  noteRemoved(entryAt(n, i), live);
  --entries_;
  if (n.state != kSpilled) {
    n.entries[i] = n.entries[n.state - 1];
    n.state = n.state - 1;
    return;
  }
  const uint32_t id = n.entries[2].pod;
  std::vector<TouchEntry>& spill = spills_[id];
  entryAt(n, i) = spill.back();
  spill.pop_back();
  if (spill.size() == 1) {  // three entries left: they fit inline again
    const TouchEntry last = spill[0];
    releaseSpill(id);
    n.entries[2] = last;
    n.state = kInlineEntries;
  }
}

uint32_t BlockStore::allocSpill() {
  if (!free_spills_.empty()) {
    const uint32_t id = free_spills_.back();
    free_spills_.pop_back();
    return id;
  }
  spills_.emplace_back();
  return static_cast<uint32_t>(spills_.size() - 1);
}

void BlockStore::releaseSpill(uint32_t id) {
  std::vector<TouchEntry>& spill = spills_[id];
  spill.clear();
  if (spill.capacity() > kKeptSpillCapacity) spill.shrink_to_fit();
  free_spills_.push_back(id);
}

void BlockStore::refresh(uint32_t index, uint32_t pod, const Liveness& live) {
  Node& n = node(index);
  Tick newest_age = ~Tick{0};
  bool found = false;
  for (uint32_t i = 0; i < entryCount(n);) {
    TouchEntry& e = entryAt(n, i);
    if (e.pod == pod) {
      newest_age = std::min<Tick>(newest_age, live.now - e.touch);
      e.touch = live.now;
      found = true;
    } else if (!live.live(e)) {
      removeEntryAt(n, i, live);  // we are on this node anyway: drop what can no longer match
      continue;
    } else {
      newest_age = std::min<Tick>(newest_age, live.now - e.touch);
    }
    ++i;
  }
  if (!found) appendEntry(n, TouchEntry{pod, live.now});
  // A block already updated in this tick keeps its place: re-linking it would cost two cache misses per block
  // on every request that shares a hot prefix, for an LRU order finer than the clock can tell apart.
  if (newest_age != 0 && lru_head_ != index) {
    lruUnlink(index);
    lruPushFront(index);
  }
}

bool BlockStore::prune(uint32_t index, const Liveness& live) {
  Node& n = node(index);
  for (uint32_t i = 0; i < entryCount(n);) {
    if (!live.live(entryAt(n, i))) {
      removeEntryAt(n, i, live);
    } else {
      ++i;
    }
  }
  if (entryCount(n) != 0) return false;
  freeNode(index, live);
  return true;
}

bool BlockStore::record(const BlockKey& key, uint32_t pod, const Liveness& live) {
  size_t pos;
  if (findSlot(key, pos)) {
    refresh(slotIndex(slots_[pos]), pod, live);
    if (++refreshes_ % kRefreshesPerReclaim == 0) reclaim(live, kTailChecksPerWrite, kSweepNodesPerWrite);
    return true;
  }
  if (blocks_ >= budget_) freeNode(lru_tail_, live);  // full: the least recently updated block makes room
  const uint32_t index = allocNode();
  if (!tableInsert(key.mixed, index)) {
    if (removals_) removals_->note(pod, live.now);  // as if stored and removed at once: its chain is broken
    Node& n = node(index);
    n.state = kFree;
    n.next = free_head_;
    free_head_ = index;
    return false;
  }
  Node& n = node(index);
  n.hash = key.hash;
  n.model = key.model;
  n.state = 1;
  n.entries[0] = TouchEntry{pod, live.now};
  ++entries_;
  ++blocks_;
  lruPushFront(index);
  reclaim(live, kTailChecksPerWrite, kSweepNodesPerWrite);
  return true;
}

bool BlockStore::remove(const BlockKey& key, uint32_t pod, const Liveness& live) {
  size_t pos;
  if (!findSlot(key, pos)) return false;
  const uint32_t index = slotIndex(slots_[pos]);
  Node& n = node(index);
  for (uint32_t i = 0; i < entryCount(n); ++i) {
    if (entryAt(n, i).pod != pod) continue;
    removeEntryAt(n, i, live);
    if (entryCount(n) == 0) freeNode(index, live);
    return true;
  }
  return false;
}

bool BlockStore::expired(const Node& n, const Liveness& live) const {
  if (n.state != kSpilled) {
    for (uint32_t i = 0; i < n.state; ++i) {
      if (live.fresh(n.entries[i])) return false;
    }
    return true;
  }
  if (live.fresh(n.entries[0]) || live.fresh(n.entries[1])) return false;
  for (const TouchEntry& e : spills_[n.entries[2].pod]) {
    if (live.fresh(e)) return false;
  }
  return true;
}

void BlockStore::reclaim(const Liveness& live, uint32_t tail_checks, uint32_t sweep_nodes) {
  // The tail is the oldest update: once it is still fresh, everything ahead of it is newer.
  for (uint32_t i = 0; i < tail_checks && lru_tail_ != kNil; ++i) {
    if (!expired(node(lru_tail_), live)) break;
    freeNode(lru_tail_, live);
  }
  sweep(live, sweep_nodes);
}

void BlockStore::sweep(const Liveness& live, uint32_t sweep_nodes) {
  // The cursor finds what the tail cannot: entries of removed pods inside blocks other pods keep fresh. It runs
  // one pass over the slab after each new removal, then rests.
  const size_t removals = live.removed->size();
  if (removals != (sweeping_ ? sweep_removals_ : swept_removals_)) {
    sweeping_ = true;  // (re)start: a pass begun before the latest removal may have passed its blocks already
    sweep_removals_ = removals;
    sweep_cursor_ = 0;
  }
  if (!sweeping_) return;
  for (uint32_t i = 0; i < sweep_nodes; ++i) {
    if (sweep_cursor_ >= used_) {
      sweeping_ = false;
      swept_removals_ = sweep_removals_;
      return;
    }
    const uint32_t index = sweep_cursor_++;
    if (node(index).state != kFree) prune(index, live);
  }
}

size_t BlockStore::memoryBytes() const {
  size_t bytes = sizeof(*this) + slot_count_ * sizeof(uint32_t);
  bytes += chunk_count_ * sizeof(chunks_[0]) + ((used_ + kChunkNodes - 1) / kChunkNodes) * kChunkNodes * sizeof(Node);
  bytes += spills_.capacity() * sizeof(spills_[0]) + free_spills_.capacity() * sizeof(uint32_t);
  for (const auto& spill : spills_) bytes += spill.capacity() * sizeof(TouchEntry);
  return bytes;
}

}  // namespace prefixgate::index
