#include "index/pod_block_ledger.h"

#include <algorithm>
#include <chrono>

namespace prefixgate::index {

namespace {
constexpr size_t kMinSimilarityInverse = 10;  // llama.cpp's default --slot-prompt-similarity 0.1
}  // namespace

std::shared_ptr<PodBlockLedger::PodBlocks> PodBlockLedger::podBlocks(PodId pod) {
  std::lock_guard lock(pods_mutex_);
  auto& slot = pods_[pod.value];
  if (!slot) slot = std::make_shared<PodBlocks>();
  return slot;
}

uint32_t PodBlockLedger::modelId(std::string_view model) {
  std::lock_guard lock(pods_mutex_);
  auto it = std::find(models_.begin(), models_.end(), model);
  if (it != models_.end()) return static_cast<uint32_t>(it - models_.begin());
  models_.emplace_back(model);
  return static_cast<uint32_t>(models_.size() - 1);
}

void PodBlockLedger::touch(PodId pod, std::string_view model, std::span<const BlockHash> hashes,
                           size_t capacity_blocks, std::vector<Evicted>& evicted) {
  if (capacity_blocks == 0 || hashes.empty()) return;
  const uint32_t model_id = modelId(model);
  const std::shared_ptr<PodBlocks> entry = podBlocks(pod);
  PodBlocks& blocks = *entry;
  std::vector<Key> dropped;
  {
    std::lock_guard lock(blocks.mutex);
    // Last block first, so the prompt's first block ends up most recent.
    for (auto hash = hashes.rbegin(); hash != hashes.rend(); ++hash) {
      const Key key{hash->value, model_id};
      auto [it, inserted] = blocks.where.try_emplace(key);
      if (inserted) {
        blocks.order.push_front(key);
      } else {
        blocks.order.splice(blocks.order.begin(), blocks.order, it->second);
      }
      it->second = blocks.order.begin();
    }
    while (blocks.order.size() > capacity_blocks) {
      dropped.push_back(blocks.order.back());
      blocks.where.erase(blocks.order.back());
      blocks.order.pop_back();
    }
  }
  appendEvicted(dropped, evicted);
}

void PodBlockLedger::forget(PodId pod, std::string_view model, std::span<const BlockHash> hashes) {
  const std::shared_ptr<PodBlocks> entry = findPod(pod);
  if (!entry || hashes.empty()) return;
  const uint32_t model_id = modelId(model);
  PodBlocks& blocks = *entry;
  std::lock_guard lock(blocks.mutex);
  for (const BlockHash& hash : hashes) {
    const auto it = blocks.where.find(Key{hash.value, model_id});
    if (it == blocks.where.end()) continue;
    blocks.order.erase(it->second);
    blocks.where.erase(it);
  }
}

void PodBlockLedger::appendEvicted(std::span<const Key> dropped, std::vector<Evicted>& evicted) {
  if (dropped.empty()) return;
  std::lock_guard lock(pods_mutex_);
  for (const Key& key : dropped) {
    const std::string& name = models_[key.model];
    auto group = std::find_if(evicted.begin(), evicted.end(), [&](const Evicted& e) { return e.model == name; });
    if (group == evicted.end()) group = evicted.insert(evicted.end(), Evicted{name, {}});
    group->hashes.push_back(BlockHash{key.hash});
  }
}

namespace {
// Blocks two chained hash lists share from the start (chained: block i equal means every block up to it is).
size_t sharedBlocks(std::span<const uint64_t> held, std::span<const BlockHash> hashes) {
  size_t n = 0;
  while (n < held.size() && n < hashes.size() && held[n] == hashes[n].value) ++n;
  return n;
}
}  // namespace

const PodBlockLedger::Slot* PodBlockLedger::firstToFree(const PodBlocks& blocks, size_t slots) {
  if (blocks.slots.size() < slots) return nullptr;  // an empty slot is idle
  const Slot* first = nullptr;
  for (const Slot& slot : blocks.slots) {
    if (slot.busy == 0) return nullptr;
    if (!first || slot.last_use < first->last_use) first = &slot;
  }
  return first;
}

size_t PodBlockLedger::busyHolder(const PodBlocks& blocks, uint32_t model_id, std::span<const BlockHash> hashes,
                                  size_t than) {
  size_t holder = kNone, longest = than;
  for (size_t i = 0; i < blocks.slots.size(); ++i) {
    const Slot& slot = blocks.slots[i];
    if (slot.busy == 0 || slot.model != model_id) continue;
    if (const size_t n = sharedBlocks(slot.hashes, hashes); n > longest) {
      longest = n;
      holder = i;
    }
  }
  return longest * kMinSimilarityInverse > hashes.size() ? holder : kNone;
}

void PodBlockLedger::takeWaiting(Slot& slot, std::vector<std::shared_ptr<SlotTurn>>& out) {
  for (const Slot::Waiting& waiting : slot.waiting)
    if (std::shared_ptr<SlotTurn> turn = waiting.turn.lock()) out.push_back(std::move(turn));
  slot.waiting.clear();
}

bool PodBlockLedger::touchSlots(PodId pod, std::string_view model, std::span<const BlockHash> hashes, size_t slots,
                                std::vector<Evicted>& evicted, uint64_t* busy_slot,
                                const std::shared_ptr<SlotTurn>& turn, bool* queued, double expected_s) {
  if (queued) *queued = false;
  if (slots == 0 || hashes.empty()) return false;
  const uint32_t model_id = modelId(model);
  const std::shared_ptr<PodBlocks> entry = podBlocks(pod);
  PodBlocks& blocks = *entry;
  std::vector<Key> dropped;
  std::vector<std::shared_ptr<SlotTurn>> woken;  // turns of slots that go (fewer slots than before)
  {
    std::lock_guard lock(blocks.mutex);
    auto commonPrefix = [&](const Slot& slot) { return slot.model == model_id ? sharedBlocks(slot.hashes, hashes) : 0; };
    // The engine chooses among its idle slots; with none idle the request waits, and takes the first slot to free:
    // the one busy the longest (requests of a workload run alike), then the same rules.
    const Slot* first_free = firstToFree(blocks, slots);
    auto eligible = [&](const Slot& slot) { return first_free ? &slot == first_free : slot.busy == 0; };
    Slot* chosen = nullptr;
    size_t best = 0;
    for (Slot& slot : blocks.slots)
      if (const size_t n = commonPrefix(slot); eligible(slot) && n > best) {
        best = n;
        chosen = &slot;
      }
    // llama.cpp reuses a slot only when the shared prefix is over a tenth of the new prompt
    // (slot_prompt_similarity); otherwise the prompt goes to an empty slot, else the least recently used.
    if (best * kMinSimilarityInverse <= hashes.size()) {
      chosen = nullptr;
      best = 0;
    }
    // A request that may wait for its slot takes the busy one holding more of it than that choice, queued there.
    bool waits = false;
    if (turn && busy_slot)
      if (const size_t holder = busyHolder(blocks, model_id, hashes, best); holder != kNone) {
        chosen = &blocks.slots[holder];
        waits = true;
      }
    if (!chosen && blocks.slots.size() < slots) {
      chosen = &blocks.slots.emplace_back();
      chosen->id = ++blocks.uses;
    }
    if (!chosen)
      for (Slot& slot : blocks.slots)
        if (eligible(slot) && (!chosen || slot.last_use < chosen->last_use)) chosen = &slot;
    // Block i of `slot` is in another slot too (chained: then at the same position).
    auto heldElsewhere = [&](const Slot& slot, size_t i) {
      for (const Slot& other : blocks.slots)
        if (&other != &slot && other.model == slot.model && i < other.hashes.size() && other.hashes[i] == slot.hashes[i])
          return true;
      return false;
    };
    // What the slot held beyond the prefix it shares with the new prompt is gone unless another slot holds it too.
    for (size_t i = commonPrefix(*chosen); i < chosen->hashes.size(); ++i)
      if (!heldElsewhere(*chosen, i)) dropped.push_back(Key{chosen->hashes[i], chosen->model});
    chosen->model = model_id;
    chosen->hashes.assign(hashes.size(), 0);
    for (size_t i = 0; i < hashes.size(); ++i) chosen->hashes[i] = hashes[i].value;
    chosen->last_use = ++blocks.uses;
    if (busy_slot) {
      if (chosen->busy++ == 0) {  // served from now on
        chosen->serving_since = now();
        chosen->serving_expected_s = expected_s;
      }
      *busy_slot = chosen->id;
    }
    if (waits) {
      chosen->waiting.push_back({turn, expected_s});
      if (queued) *queued = true;
    }
    // Fewer slots than before (the engine restarted smaller): the least recently used go.
    while (blocks.slots.size() > slots) {
      auto oldest = std::min_element(blocks.slots.begin(), blocks.slots.end(),
                                     [](const Slot& a, const Slot& b) { return a.last_use < b.last_use; });
      for (size_t i = 0; i < oldest->hashes.size(); ++i)
        if (!heldElsewhere(*oldest, i)) dropped.push_back(Key{oldest->hashes[i], oldest->model});
      takeWaiting(*oldest, woken);
      blocks.slots.erase(oldest);
    }
  }
  for (const auto& t : woken) t->ready();
  appendEvicted(dropped, evicted);
  return true;
}

void PodBlockLedger::releaseSlot(PodId pod, uint64_t slot) {
  const std::shared_ptr<PodBlocks> found = findPod(pod);
  if (!found) return;  // the pod left
  PodBlocks& blocks = *found;
  std::shared_ptr<SlotTurn> next;
  {
    std::lock_guard lock(blocks.mutex);
    for (Slot& s : blocks.slots) {
      if (s.id != slot) continue;
      if (s.busy > 0) --s.busy;
      // The first request still waiting for the slot (one that gave up let its turn go) is next, served from now on
      // (a request the engine queued for the slot without a turn: for an unknown time).
      double next_expected_s = -1;
      while (!next && !s.waiting.empty()) {
        next = s.waiting.front().turn.lock();
        next_expected_s = s.waiting.front().expected_s;
        s.waiting.pop_front();
      }
      s.serving_since = now();
      s.serving_expected_s = next ? next_expected_s : -1;
    }
  }
  if (next) next->ready();
}

std::shared_ptr<PodBlockLedger::PodBlocks> PodBlockLedger::findPod(PodId pod) const {
  std::lock_guard lock(pods_mutex_);
  auto it = pods_.find(pod.value);
  return it == pods_.end() ? nullptr : it->second;
}

std::optional<PodBlockLedger::SlotPrefixes> PodBlockLedger::slotPrefix(PodId pod, std::string_view model,
                                                                       std::span<const BlockHash> hashes,
                                                                       size_t slots) const {
  const std::shared_ptr<const PodBlocks> blocks = findPod(pod);
  if (!blocks) return std::nullopt;
  std::optional<uint32_t> model_id;
  {
    std::lock_guard lock(pods_mutex_);
    auto it = std::find(models_.begin(), models_.end(), model);
    if (it != models_.end()) model_id = static_cast<uint32_t>(it - models_.begin());
  }
  std::lock_guard lock(blocks->mutex);
  if (blocks->slots.empty()) return std::nullopt;
  if (!model_id) return SlotPrefixes{};
  const Slot* first_free = firstToFree(*blocks, slots);
  size_t idle = 0, any = 0;
  for (const Slot& slot : blocks->slots) {
    const size_t n = slot.model == *model_id ? sharedBlocks(slot.hashes, hashes) : 0;
    any = std::max(any, n);
    if (first_free ? &slot == first_free : slot.busy == 0) idle = std::max(idle, n);
  }
  SlotPrefixes out{idle * kMinSimilarityInverse > hashes.size() ? idle : 0, any};
  if (const size_t holder = busyHolder(*blocks, *model_id, hashes, out.idle); holder != kNone) {
    const Slot& slot = blocks->slots[holder];
    out.queued = sharedBlocks(slot.hashes, hashes);
    out.ahead = slot.busy;
    out.serving_s = std::max(0.0, std::chrono::duration<double>(now() - slot.serving_since).count());
    out.serving_expected_s = slot.serving_expected_s;
    // The others busy there: those waiting whose time is known (a waiter that gave up still counts until its
    // request ends: it holds the slot's count), the rest unknown.
    uint32_t known = 0;
    for (const Slot::Waiting& waiting : slot.waiting)
      if (waiting.expected_s >= 0 && !waiting.turn.expired()) {
        out.waiting_expected_s += waiting.expected_s;
        ++known;
      }
    out.waiting_unknown = slot.busy > known + 1 ? slot.busy - known - 1 : 0;
  }
  return out;
}

void PodBlockLedger::removePod(PodId pod) {
  std::shared_ptr<PodBlocks> gone;
  {
    std::lock_guard lock(pods_mutex_);
    auto it = pods_.find(pod.value);
    if (it == pods_.end()) return;
    gone = std::move(it->second);
    pods_.erase(it);
  }
  // Requests waiting for one of its slots wait for nothing now.
  std::vector<std::shared_ptr<SlotTurn>> woken;
  {
    std::lock_guard lock(gone->mutex);
    for (Slot& slot : gone->slots) takeWaiting(slot, woken);
  }
  for (const auto& t : woken) t->ready();
}

size_t PodBlockLedger::blocks(PodId pod) const {
  std::lock_guard lock(pods_mutex_);
  auto it = pods_.find(pod.value);
  if (it == pods_.end()) return 0;
  std::lock_guard pod_lock(it->second->mutex);
  return it->second->order.size();
}

}  // namespace prefixgate::index
