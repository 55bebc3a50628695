#include "index/pod_block_ledger.h"

#include <algorithm>

namespace prefixgate::index {

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
  if (dropped.empty()) return;
  std::lock_guard lock(pods_mutex_);
  for (const Key& key : dropped) {
    const std::string& name = models_[key.model];
    auto group = std::find_if(evicted.begin(), evicted.end(), [&](const Evicted& e) { return e.model == name; });
    if (group == evicted.end()) group = evicted.insert(evicted.end(), Evicted{name, {}});
    group->hashes.push_back(BlockHash{key.hash});
  }
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
