#include "routing/kv/kv_event_index.h"

#include <algorithm>
#include <chrono>

#include "index/block_hash.h"
#include "tokenize/tokenizer.h"

namespace prefixgate::routing {
namespace {

// Entries in the tier indexes never expire by age: an engine's events say when a block goes.
constexpr auto kNoExpiry = index::PrefixIndex::kNeverExpire;

// A block with extra keys (multimodal inputs, cache salts) gets them mixed into its hash.
uint64_t mixExtraKeys(uint64_t hash, uint64_t extra) {
  uint64_t x = hash ^ (extra * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  return x ^ (x >> 29);
}

uint64_t slotKey(PodId pod, uint32_t rank) { return (uint64_t{pod.value} << 32) | rank; }

}  // namespace

// Readers' view: every pod's slot ids (one per data-parallel rank seen).
struct KvEventIndex::SlotTable {
  std::unordered_map<uint32_t, std::vector<PodId>> by_pod;
};

KvEventIndex::KvEventIndex(const KvEventIndexOptions& options, const Clock& clock)
    : options_(options), table_(std::make_shared<const SlotTable>()) {
  for (auto& tier : tiers_)
    tier = std::make_unique<index::PrefixIndex>(
        index::PrefixIndexOptions{options.block_capacity, kNoExpiry, options.shards}, clock);
}

KvEventIndex::~KvEventIndex() = default;

uint16_t KvEventIndex::modelIndex(std::string_view model) {
  for (size_t i = 0; i < models_.size(); ++i)
    if (models_[i] == model) return static_cast<uint16_t>(i);
  models_.emplace_back(model);
  return static_cast<uint16_t>(models_.size() - 1);
}

KvEventIndex::Slot& KvEventIndex::slotFor(PodId pod, uint32_t rank) {
  auto& slot = slots_[slotKey(pod, rank)];
  if (!slot) {
    slot = std::make_unique<Slot>();
    slot->id = PodId{next_slot_++};
    publishSlots();
  }
  return *slot;
}

void KvEventIndex::publishSlots() {
  auto table = std::make_shared<SlotTable>();
  for (const auto& [key, slot] : slots_) table->by_pod[static_cast<uint32_t>(key >> 32)].push_back(slot->id);
  table_.store(std::move(table), std::memory_order_release);
}

KvApplied KvEventIndex::apply(PodId pod, std::string_view model, const engine::KvEventBatch& batch) {
  KvApplied applied;
  Slot& slot = slotFor(pod, batch.data_parallel_rank.value_or(0));
  const uint16_t base_model = modelIndex(model);
  for (const engine::KvCacheEvent& event : batch.events) {
    if (const auto* stored = std::get_if<engine::KvBlockStored>(&event)) {
      // A LoRA adapter's blocks are indexed under the adapter's name, which requests give as their model.
      uint16_t model = base_model;
      if (!stored->lora_name.empty()) {
        model = modelIndex(stored->lora_name);
      } else if (stored->lora_id) {
        model = modelIndex("lora-id:" + std::to_string(*stored->lora_id));
      }
      store(slot, model, *stored, applied);
    } else if (const auto* removed = std::get_if<engine::KvBlockRemoved>(&event)) {
      remove(slot, *removed, applied);
    } else {
      clearSlot(slot);
      ++applied.clears;
    }
  }
  return applied;
}

void KvEventIndex::store(Slot& slot, uint16_t model, const engine::KvBlockStored& event, KvApplied& applied) {
  const size_t count = event.block_hashes.size();
  Tier tier = event.medium == engine::KvMedium::kGpu ? kGpu : kCpu;
  if (event.group_idx != 0 || event.medium == engine::KvMedium::kOther || event.block_size == 0 ||
      event.token_ids.size() != count * event.block_size) {
    applied.ignored_blocks += count;
    return;
  }
  auto& map = slot.blocks[tier];
  BlockHash parent{options_.seed};
  if (event.parent) {
    // An offloaded (CPU) block's parent may be known from the GPU tier only, and the other way round.
    const Block* found = nullptr;
    for (Tier t : {tier, tier == kGpu ? kCpu : kGpu}) {
      auto it = slot.blocks[t].find(event.parent->value);
      if (it == slot.blocks[t].end()) continue;
      found = &it->second;
      break;
    }
    if (found == nullptr) {
      applied.orphan_blocks += count;
      return;
    }
    parent = found->hash;
  }
  {
    std::lock_guard lock(block_tokens_mutex_);
    block_tokens_[models_[model]] = event.block_size;
  }
  packed_.clear();
  tokenize::packTokenIds(event.token_ids, packed_);
  const size_t block_bytes = size_t{event.block_size} * tokenize::kTokenIdBytes;
  hashes_.clear();
  for (size_t i = 0; i < count; ++i) {
    index::hashBlocksAfter(parent, std::span(packed_).subspan(i * block_bytes, block_bytes), block_bytes,
                           options_.seed, hashes_);
    if (i < event.extra_keys.size() && event.extra_keys[i] != 0)
      hashes_.back() = BlockHash{mixExtraKeys(hashes_.back().value, event.extra_keys[i])};
    parent = hashes_.back();
    map[event.block_hashes[i].value] = Block{hashes_.back(), model};
  }
  tiers_[tier]->record(models_[model], hashes_, slot.id);
  applied.blocks_stored += count;
  // A publisher that stores without ever removing (or a cache larger than the whole index) would grow the map
  // without bound: past the index's capacity its view is unreliable anyway, so it is forgotten and rebuilt.
  if (map.size() > options_.block_capacity) {
    clearSlot(slot);
    ++applied.overflows;
  }
}

void KvEventIndex::remove(Slot& slot, const engine::KvBlockRemoved& event, KvApplied& applied) {
  if (event.group_idx != 0 || event.medium == engine::KvMedium::kOther) {
    applied.ignored_blocks += event.block_hashes.size();
    return;
  }
  Tier tier = event.medium == engine::KvMedium::kGpu ? kGpu : kCpu;
  auto& map = slot.blocks[tier];
  for (EngineBlockHash hash : event.block_hashes) {
    auto it = map.find(hash.value);
    if (it == map.end()) {
      ++applied.unknown_removals;
      continue;
    }
    tiers_[tier]->remove(models_[it->second.model], std::span(&it->second.hash, 1), slot.id);
    map.erase(it);
    ++applied.blocks_removed;
  }
}

void KvEventIndex::clearSlot(Slot& slot) {
  // A fresh identity: the old one's entries stop matching at once (an O(1) tombstone), reclaimed later.
  for (auto& tier : tiers_) tier->removePod(slot.id);
  for (auto& map : slot.blocks) map.clear();
  slot.id = PodId{next_slot_++};
  publishSlots();
}

void KvEventIndex::resetPod(PodId pod) {
  for (auto& [key, slot] : slots_)
    if (static_cast<uint32_t>(key >> 32) == pod.value) clearSlot(*slot);
}

void KvEventIndex::removePod(PodId pod) {
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (static_cast<uint32_t>(it->first >> 32) != pod.value) {
      ++it;
      continue;
    }
    for (auto& tier : tiers_) tier->removePod(it->second->id);
    it = slots_.erase(it);
  }
  publishSlots();
}

void KvEventIndex::match(std::string_view model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                         std::span<uint32_t> matched_out) const {
  std::fill(matched_out.begin(), matched_out.end(), 0u);
  std::shared_ptr<const SlotTable> table = table_.load(std::memory_order_acquire);
  thread_local std::vector<PodId> slot_ids;
  thread_local std::vector<size_t> owner;
  thread_local std::vector<uint32_t> gpu;
  thread_local std::vector<uint32_t> cpu;
  slot_ids.clear();
  owner.clear();
  for (size_t i = 0; i < candidates.size() && i < matched_out.size(); ++i) {
    auto it = table->by_pod.find(candidates[i].value);
    if (it == table->by_pod.end()) continue;
    for (PodId id : it->second) {
      slot_ids.push_back(id);
      owner.push_back(i);
    }
  }
  if (slot_ids.empty()) return;
  gpu.assign(slot_ids.size(), 0);
  cpu.assign(slot_ids.size(), 0);
  tiers_[kGpu]->match(model, hashes, slot_ids, gpu);
  tiers_[kCpu]->match(model, hashes, slot_ids, cpu);
  for (size_t j = 0; j < slot_ids.size(); ++j) {
    uint32_t blocks = gpu[j];
    if (cpu[j] > gpu[j]) blocks += static_cast<uint32_t>(options_.cpu_block_credit * (cpu[j] - gpu[j]));
    matched_out[owner[j]] = std::max(matched_out[owner[j]], blocks);
  }
}

uint32_t KvEventIndex::blockTokens(std::string_view model) const {
  std::lock_guard lock(block_tokens_mutex_);
  auto it = block_tokens_.find(std::string(model));
  return it == block_tokens_.end() ? 0 : it->second;
}

size_t KvEventIndex::podBlocks(PodId pod) const {
  size_t blocks = 0;
  for (const auto& [key, slot] : slots_)
    if (static_cast<uint32_t>(key >> 32) == pod.value) blocks += slot->blocks[kGpu].size();
  return blocks;
}

}  // namespace prefixgate::routing
