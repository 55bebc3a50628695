#include "index/pod_block_ledger.h"

#include <algorithm>

namespace prefixgate::index {

namespace {
constexpr size_t kMinSimilarityInverse = 10;  // llama.cpp's default --slot-prompt-similarity 0.1
}  // namespace

PodBlockLedger::PodBlocks& PodBlockLedger::podBlocks(PodId pod) {
  std::lock_guard lock(pods_mutex_);
  auto& slot = pods_[pod.value];
  if (!slot) slot = std::make_unique<PodBlocks>();
  return *slot;
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
  PodBlocks& blocks = podBlocks(pod);
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

void PodBlockLedger::touchSlots(PodId pod, std::string_view model, std::span<const BlockHash> hashes, size_t slots,
                                std::vector<Evicted>& evicted) {
  if (slots == 0 || hashes.empty()) return;
  const uint32_t model_id = modelId(model);
  PodBlocks& blocks = podBlocks(pod);
  std::vector<Key> dropped;
  {
    std::lock_guard lock(blocks.mutex);
    // Chained hashes: two prompts share block i exactly when they share every block up to it.
    auto commonPrefix = [&](const Slot& slot) {
      if (slot.model != model_id) return size_t{0};
      size_t n = 0;
      while (n < slot.hashes.size() && n < hashes.size() && slot.hashes[n] == hashes[n].value) ++n;
      return n;
    };
    Slot* chosen = nullptr;
    size_t best = 0;
    for (Slot& slot : blocks.slots)
      if (const size_t n = commonPrefix(slot); n > best) {
        best = n;
        chosen = &slot;
      }
    // llama.cpp reuses a slot only when the shared prefix is over a tenth of the new prompt
    // (slot_prompt_similarity); otherwise the prompt goes to an empty slot, else the least recently used.
    if (best * kMinSimilarityInverse <= hashes.size()) chosen = nullptr;
    if (!chosen && blocks.slots.size() < slots) chosen = &blocks.slots.emplace_back();
    if (!chosen)
      for (Slot& slot : blocks.slots)
        if (!chosen || slot.last_use < chosen->last_use) chosen = &slot;
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
    // Fewer slots than before (the engine restarted smaller): the least recently used go.
    while (blocks.slots.size() > slots) {
      auto oldest = std::min_element(blocks.slots.begin(), blocks.slots.end(),
                                     [](const Slot& a, const Slot& b) { return a.last_use < b.last_use; });
      for (size_t i = 0; i < oldest->hashes.size(); ++i)
        if (!heldElsewhere(*oldest, i)) dropped.push_back(Key{oldest->hashes[i], oldest->model});
      blocks.slots.erase(oldest);
    }
  }
  appendEvicted(dropped, evicted);
}

void PodBlockLedger::removePod(PodId pod) {
  std::lock_guard lock(pods_mutex_);
  pods_.erase(pod.value);
}

size_t PodBlockLedger::blocks(PodId pod) const {
  std::lock_guard lock(pods_mutex_);
  auto it = pods_.find(pod.value);
  if (it == pods_.end()) return 0;
  std::lock_guard pod_lock(it->second->mutex);
  return it->second->order.size();
}

}  // namespace prefixgate::index
