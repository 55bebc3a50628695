#include "routing/kv/kv_event_index.h"

#include <algorithm>
#include <functional>

#include "index/block_hash.h"
#include "tokenize/tokenizer.h"

namespace prefixgate::routing {
namespace {

// Entries in the tier indexes never expire by age: an engine's events say when a block goes.
constexpr auto kNoExpiry = index::PrefixIndex::kNeverExpire;
// Every model's blocks sit in the tier indexes under this one name, told apart by the model's digest in their key.
constexpr std::string_view kIndexModel = "";
// A slot's list of stored blocks is rebuilt without its stale entries once it holds this many more than blocks.
constexpr size_t kStaleStoredSlack = 1024;

// Mixes `extra` (extra keys' digest, a model's digest) into a hash (index::mixExtra: a request's cache_salt is mixed
// the same way, so a salted prompt matches the blocks its engine stored under that salt).
constexpr uint64_t mix(uint64_t hash, uint64_t extra) { return index::mixExtra(hash, extra); }

uint64_t slotKey(PodId pod, uint32_t rank) { return (uint64_t{pod.value} << 32) | rank; }
uint32_t podOf(uint64_t slot_key) { return static_cast<uint32_t>(slot_key >> 32); }

// The tier indexes' capacity: the blocks the slots may hold plus room for the shards' uneven shares, so that no
// shard's LRU ever evicts an entry before the slots' own accounting (makeRoom) decides which go.
size_t indexCapacity(size_t blocks, size_t shards) { return blocks + blocks / 4 + shards * 64; }

}  // namespace

std::string_view kvRefusalName(KvRefusal reason) {
  switch (reason) {
    case KvRefusal::kRank: return "rank";
    case KvRefusal::kAdapters: return "adapters";
    case KvRefusal::kAdapterName: return "adapter_name";
    case KvRefusal::kPodCapacity: return "pod_capacity";
    case KvRefusal::kIndexShare: return "index_share";
  }
  return "unknown";
}

// Readers' view: every pod's slots (one per data-parallel rank seen), with their block sizes.
struct KvEventIndex::SlotTable {
  struct View {
    PodId id;
    uint32_t block_tokens;
  };
  std::unordered_map<uint32_t, std::vector<View>> by_pod;
};

KvEventIndex::KvEventIndex(const KvEventIndexOptions& options, const Clock& clock)
    : options_(options), table_(std::make_shared<const SlotTable>()) {
  const size_t capacity = indexCapacity(options.block_capacity, options.shards);
  for (auto& tier : tiers_)
    tier = std::make_unique<index::PrefixIndex>(index::PrefixIndexOptions{capacity, kNoExpiry, options.shards}, clock);
}

KvEventIndex::~KvEventIndex() = default;

uint64_t KvEventIndex::modelDigest(std::string_view model) const {
  return mix(std::hash<std::string_view>{}(model), options_.seed);
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
  for (const auto& [key, slot] : slots_) table->by_pod[podOf(key)].push_back({slot->id, slot->block_tokens});
  table_.store(std::move(table), std::memory_order_release);
}

size_t KvEventIndex::capacityBlocks(const KvPodLimits& limits, uint32_t block_tokens) const {
  size_t blocks = options_.bounds.max_pod_blocks;
  if (limits.capacity_tokens > 0 && block_tokens > 0) {
    const uint64_t per_rank = limits.capacity_tokens / std::max<uint32_t>(1, limits.ranks);
    blocks = static_cast<size_t>(std::max<uint64_t>(1, (per_rank + block_tokens - 1) / block_tokens));
  }
  return std::max<size_t>(1, std::min(blocks, options_.block_capacity));
}

KvApplied KvEventIndex::apply(PodId pod, std::string_view model, const engine::KvEventBatch& batch,
                              const KvPodLimits& limits) {
  KvApplied applied;
  const uint32_t rank = batch.data_parallel_rank.value_or(0);
  if (rank >= std::max<uint32_t>(1, limits.ranks)) {
    // An undeclared rank would get a slot of its own: a publisher could make as many as it likes.
    ++applied.refused[static_cast<size_t>(KvRefusal::kRank)];
    return applied;
  }
  Slot& slot = slotFor(pod, rank);
  const uint64_t base = modelDigest(model);
  for (const engine::KvCacheEvent& event : batch.events) {
    if (const auto* stored = std::get_if<engine::KvBlockStored>(&event)) {
      // A LoRA adapter's blocks are indexed under the adapter's name, which requests give as their model.
      uint64_t digest = base;
      if (!stored->lora_name.empty() || stored->lora_id) {
        if (!admitAdapter(slot, base, *stored, digest, applied)) continue;
      }
      const bool gpu = stored->medium == engine::KvMedium::kGpu;
      store(slot, digest, *stored, gpu ? capacityBlocks(limits, stored->block_size) : capacityBlocks({}, 0), applied);
    } else if (const auto* removed = std::get_if<engine::KvBlockRemoved>(&event)) {
      remove(slot, *removed, applied);
    } else {
      clearSlot(slot);
      ++applied.clears;
    }
  }
  // What other ranks' stores took from this pod's ranks, reported now that the pod is known by name.
  for (auto& [key, other] : slots_) {
    if (podOf(key) != pod.value) continue;
    applied.refused[static_cast<size_t>(KvRefusal::kIndexShare)] += other->share_evictions;
    other->share_evictions = 0;
  }
  return applied;
}

bool KvEventIndex::admitAdapter(Slot& slot, uint64_t base, const engine::KvBlockStored& event, uint64_t& digest,
                                KvApplied& applied) {
  if (event.lora_name.size() > options_.bounds.max_adapter_name_bytes) {
    ++applied.refused[static_cast<size_t>(KvRefusal::kAdapterName)];
    return false;
  }
  digest = event.lora_name.empty() ? modelDigest("lora-id:" + std::to_string(event.lora_id.value_or(0)))
                                   : modelDigest(event.lora_name);
  if (digest == base || slot.models.count(digest) != 0) return true;
  // Adapters are counted while the rank holds blocks of them, so one that left the engine's cache frees its place.
  const size_t adapters = slot.models.size() - slot.models.count(base);
  if (adapters < options_.bounds.max_pod_adapters) return true;
  ++applied.refused[static_cast<size_t>(KvRefusal::kAdapters)];
  return false;
}

void KvEventIndex::store(Slot& slot, uint64_t model, const engine::KvBlockStored& event, size_t cap,
                         KvApplied& applied) {
  const size_t count = event.block_hashes.size();
  const Tier tier = event.medium == engine::KvMedium::kGpu ? kGpu : kCpu;
  if (event.group_idx != 0 || event.medium == engine::KvMedium::kOther || event.block_size == 0 ||
      event.token_ids.size() != count * event.block_size) {
    applied.ignored_blocks += count;
    return;
  }
  if (slot.block_tokens != event.block_size) {
    // One engine has one block size: a new one means a new engine (or a confused publisher), and blocks of the
    // old size would never match a request cut at the new one.
    if (slot.block_tokens != 0) {
      clearSlot(slot);
      ++applied.resets;
    }
    slot.block_tokens = event.block_size;
    publishSlots();
  }
  TierBlocks& held = slot.tiers[tier];
  BlockHash parent{options_.seed};
  if (event.parent) {
    // An offloaded (CPU) block's parent may be known from the GPU tier only, and the other way round.
    const Held* found = nullptr;
    for (Tier t : {tier, tier == kGpu ? kCpu : kGpu}) {
      auto it = slot.tiers[t].blocks.find(event.parent->value);
      if (it == slot.tiers[t].blocks.end()) continue;
      found = &it->second;
      break;
    }
    if (found == nullptr) {
      applied.orphan_blocks += count;
      return;
    }
    parent = found->chain;
  }
  // The head of a chain is what prefix matches need: blocks past the cap are the event's tail.
  size_t kept = std::min(count, cap);
  applied.refused[static_cast<size_t>(KvRefusal::kPodCapacity)] += count - kept;
  kept = makeRoom(slot, tier, kept, cap, applied);
  if (kept == 0) return;
  packed_.clear();
  tokenize::packTokenIds(std::span(event.token_ids).first(kept * event.block_size), packed_);
  const size_t block_bytes = size_t{event.block_size} * tokenize::kTokenIdBytes;
  hashes_.clear();
  keys_.clear();
  const uint64_t first_order = slot.next_order;
  slot.next_order += kept;
  for (size_t i = 0; i < kept; ++i) {
    index::hashBlocksAfter(parent, std::span(packed_).subspan(i * block_bytes, block_bytes), block_bytes,
                           options_.seed, hashes_);
    if (i < event.extra_keys.size() && event.extra_keys[i] != 0)
      hashes_.back() = BlockHash{mix(hashes_.back().value, event.extra_keys[i])};
    parent = hashes_.back();
    const BlockHash key{mix(hashes_.back().value, model)};
    auto it = held.blocks.find(event.block_hashes[i].value);
    if (it != held.blocks.end()) {
      // Stored again (under another parent or model, or after a lost removal): its old entry goes first.
      const BlockHash old_key{mix(it->second.chain.value, it->second.model)};
      if (old_key != key) tiers_[tier]->remove(kIndexModel, std::span(&old_key, 1), slot.id);
      forget(slot, tier, it);
    }
    // The event's last block is the oldest of its order: engines evict a chain from its tail.
    held.blocks.emplace(event.block_hashes[i].value, Held{hashes_.back(), model, first_order + (kept - 1 - i)});
    ++slot.models[model];
    ++held_[tier];
  }
  // Only the blocks the slot still holds as stored here are indexed: an engine hash given twice in one event is held
  // once, under its last place, and the first key must not outlive it in the index.
  for (size_t i = 0; i < kept; ++i) {
    const Held& block = held.blocks.find(event.block_hashes[i].value)->second;
    if (block.order == first_order + (kept - 1 - i)) keys_.push_back(BlockHash{mix(block.chain.value, model)});
  }
  for (size_t i = kept; i-- > 0;) held.stored.emplace_back(event.block_hashes[i].value, first_order + (kept - 1 - i));
  tiers_[tier]->record(kIndexModel, keys_, slot.id);
  applied.blocks_stored += kept;
  compact(held);
}

size_t KvEventIndex::makeRoom(Slot& slot, Tier tier, size_t incoming, size_t cap, KvApplied& applied) {
  TierBlocks& held = slot.tiers[tier];
  auto& refused = applied.refused;
  if (held.blocks.size() + incoming > cap)
    refused[static_cast<size_t>(KvRefusal::kPodCapacity)] += evictOldest(slot, tier, held.blocks.size() + incoming - cap);
  const size_t budget = options_.block_capacity;
  const size_t share = budget / std::max<size_t>(1, slots_.size());
  while (incoming > 0 && held_[tier] + incoming > budget) {
    const size_t over = held_[tier] + incoming - budget;
    // The storing rank pays first when it holds more than its share; then a rank over its share; a rank within
    // its share never loses a block to another's store: what does not fit then is not stored.
    if (!held.blocks.empty() && held.blocks.size() + incoming > share) {
      refused[static_cast<size_t>(KvRefusal::kIndexShare)] += evictOldest(slot, tier, std::min(over, held.blocks.size()));
      continue;
    }
    Slot* largest = nullptr;
    for (auto& [key, other] : slots_) {
      if (other.get() != &slot &&
          (largest == nullptr || other->tiers[tier].blocks.size() > largest->tiers[tier].blocks.size()))
        largest = other.get();
    }
    if (largest != nullptr && largest->tiers[tier].blocks.size() > share) {
      const size_t excess = largest->tiers[tier].blocks.size() - share;
      largest->share_evictions += evictOldest(*largest, tier, std::min(over, excess));
      continue;
    }
    const size_t trimmed = std::min(over, incoming);
    refused[static_cast<size_t>(KvRefusal::kIndexShare)] += trimmed;
    incoming -= trimmed;
  }
  return incoming;
}

size_t KvEventIndex::evictOldest(Slot& slot, Tier tier, size_t count) {
  TierBlocks& held = slot.tiers[tier];
  keys_.clear();
  while (keys_.size() < count && !held.stored.empty()) {
    const auto [engine_hash, order] = held.stored.front();
    held.stored.pop_front();
    auto it = held.blocks.find(engine_hash);
    if (it == held.blocks.end() || it->second.order != order) continue;  // stale: removed or stored again
    keys_.push_back(BlockHash{mix(it->second.chain.value, it->second.model)});
    forget(slot, tier, it);
  }
  tiers_[tier]->remove(kIndexModel, keys_, slot.id);
  return keys_.size();
}

void KvEventIndex::forget(Slot& slot, Tier tier, std::unordered_map<uint64_t, Held>::iterator it) {
  auto model = slot.models.find(it->second.model);
  if (model != slot.models.end() && --model->second == 0) slot.models.erase(model);
  slot.tiers[tier].blocks.erase(it);
  --held_[tier];
}

void KvEventIndex::compact(TierBlocks& tier) {
  if (tier.stored.size() <= 2 * tier.blocks.size() + kStaleStoredSlack) return;
  std::erase_if(tier.stored, [&](const std::pair<uint64_t, uint64_t>& entry) {
    auto it = tier.blocks.find(entry.first);
    return it == tier.blocks.end() || it->second.order != entry.second;
  });
}

void KvEventIndex::remove(Slot& slot, const engine::KvBlockRemoved& event, KvApplied& applied) {
  if (event.group_idx != 0 || event.medium == engine::KvMedium::kOther) {
    applied.ignored_blocks += event.block_hashes.size();
    return;
  }
  const Tier tier = event.medium == engine::KvMedium::kGpu ? kGpu : kCpu;
  auto& blocks = slot.tiers[tier].blocks;
  keys_.clear();
  for (EngineBlockHash hash : event.block_hashes) {
    auto it = blocks.find(hash.value);
    if (it == blocks.end()) {
      ++applied.unknown_removals;
      continue;
    }
    keys_.push_back(BlockHash{mix(it->second.chain.value, it->second.model)});
    forget(slot, tier, it);
    ++applied.blocks_removed;
  }
  tiers_[tier]->remove(kIndexModel, keys_, slot.id);
  compact(slot.tiers[tier]);
}

void KvEventIndex::clearSlot(Slot& slot) {
  // Entry by entry (at most the slot's cap): the slot keeps its id, so a clear leaves no tombstone behind however
  // often a publisher sends one.
  for (Tier tier : {kGpu, kCpu}) {
    TierBlocks& held = slot.tiers[tier];
    if (held.blocks.empty() && held.stored.empty()) continue;  // a clear of nothing costs nothing
    keys_.clear();
    for (const auto& [engine_hash, block] : held.blocks) keys_.push_back(BlockHash{mix(block.chain.value, block.model)});
    tiers_[tier]->remove(kIndexModel, keys_, slot.id);
    held_[tier] -= held.blocks.size();
    // Swapped out rather than cleared: a large view's buckets and pages go back with it.
    std::unordered_map<uint64_t, Held>().swap(held.blocks);
    std::deque<std::pair<uint64_t, uint64_t>>().swap(held.stored);
  }
  if (!slot.models.empty()) std::unordered_map<uint64_t, size_t>().swap(slot.models);
}

void KvEventIndex::resetPod(PodId pod) {
  for (auto& [key, slot] : slots_)
    if (podOf(key) == pod.value) clearSlot(*slot);
}

void KvEventIndex::removePod(PodId pod) {
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (podOf(it->first) != pod.value) {
      ++it;
      continue;
    }
    clearSlot(*it->second);
    it = slots_.erase(it);
  }
  publishSlots();
}

void KvEventIndex::match(std::string_view model, std::span<const BlockHash> hashes, std::span<const PodId> candidates,
                         std::span<uint32_t> matched_out) const {
  const KvPromptHashes any{0, hashes};
  match(model, std::span(&any, 1), candidates, matched_out);
}

void KvEventIndex::match(std::string_view model, std::span<const KvPromptHashes> prompts,
                         std::span<const PodId> candidates, std::span<uint32_t> matched_out) const {
  std::fill(matched_out.begin(), matched_out.end(), 0u);
  if (prompts.empty()) return;
  std::shared_ptr<const SlotTable> table = table_.load(std::memory_order_acquire);
  const uint64_t digest = modelDigest(model);
  const uint32_t unit = prompts[0].block_tokens;
  const size_t most = prompts[0].hashes.size();
  thread_local std::vector<PodId> slot_ids;
  thread_local std::vector<size_t> owner;
  thread_local std::vector<uint32_t> gpu;
  thread_local std::vector<uint32_t> cpu;
  thread_local std::vector<BlockHash> keys;
  for (const KvPromptHashes& prompt : prompts) {
    slot_ids.clear();
    owner.clear();
    for (size_t i = 0; i < candidates.size() && i < matched_out.size(); ++i) {
      auto it = table->by_pod.find(candidates[i].value);
      if (it == table->by_pod.end()) continue;
      for (const SlotTable::View& view : it->second) {
        if (prompt.block_tokens != 0 && view.block_tokens != prompt.block_tokens) continue;
        slot_ids.push_back(view.id);
        owner.push_back(i);
      }
    }
    if (slot_ids.empty()) continue;
    keys.clear();
    for (BlockHash hash : prompt.hashes) keys.push_back(BlockHash{mix(hash.value, digest)});
    gpu.assign(slot_ids.size(), 0);
    cpu.assign(slot_ids.size(), 0);
    tiers_[kGpu]->match(kIndexModel, keys, slot_ids, gpu);
    tiers_[kCpu]->match(kIndexModel, keys, slot_ids, cpu);
    for (size_t j = 0; j < slot_ids.size(); ++j) {
      uint64_t blocks = gpu[j];
      if (cpu[j] > gpu[j]) blocks += static_cast<uint64_t>(options_.cpu_block_credit * (cpu[j] - gpu[j]));
      // In the first prompt's blocks: the tokens this rank holds, whole blocks of that size.
      if (prompt.block_tokens != 0 && unit != 0 && prompt.block_tokens != unit)
        blocks = std::min<uint64_t>(blocks * prompt.block_tokens / unit, most);
      matched_out[owner[j]] = std::max(matched_out[owner[j]], static_cast<uint32_t>(blocks));
    }
  }
}

void KvEventIndex::blockSizes(std::span<const PodId> candidates, std::vector<std::pair<uint32_t, uint32_t>>& out) const {
  out.clear();
  std::shared_ptr<const SlotTable> table = table_.load(std::memory_order_acquire);
  for (PodId pod : candidates) {
    auto it = table->by_pod.find(pod.value);
    if (it == table->by_pod.end()) continue;
    // A pod counts once per size, however many of its ranks use it.
    for (size_t r = 0; r < it->second.size(); ++r) {
      const uint32_t size = it->second[r].block_tokens;
      bool seen = size == 0;
      for (size_t q = 0; q < r && !seen; ++q) seen = it->second[q].block_tokens == size;
      if (seen) continue;
      auto found = std::find_if(out.begin(), out.end(), [&](const auto& entry) { return entry.first == size; });
      if (found == out.end()) {
        out.emplace_back(size, 1);
      } else {
        ++found->second;
      }
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; });
}

size_t KvEventIndex::podBlocks(PodId pod) const {
  size_t blocks = 0;
  for (const auto& [key, slot] : slots_)
    if (podOf(key) == pod.value) blocks += slot->tiers[kGpu].blocks.size();
  return blocks;
}

size_t KvEventIndex::podModels(PodId pod) const {
  size_t models = 0;
  for (const auto& [key, slot] : slots_)
    if (podOf(key) == pod.value) models += slot->models.size();
  return models;
}

uint32_t KvEventIndex::podBlockTokens(PodId pod) const {
  for (const auto& [key, slot] : slots_)
    if (podOf(key) == pod.value && slot->block_tokens != 0) return slot->block_tokens;
  return 0;
}

size_t KvEventIndex::indexEntries() const { return tiers_[kGpu]->entryCount() + tiers_[kCpu]->entryCount(); }

size_t KvEventIndex::indexMemoryBytes() const { return tiers_[kGpu]->memoryBytes() + tiers_[kCpu]->memoryBytes(); }

}  // namespace prefixgate::routing
