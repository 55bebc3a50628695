#include "index/model_registry.h"

#include <functional>

namespace prefixgate::index {
namespace {

inline size_t slotOf(std::string_view name, size_t slot_count) {
  return std::hash<std::string_view>{}(name) & (slot_count - 1);
}

}  // namespace

static_assert((ModelRegistry::kMaxModels * 2 & (ModelRegistry::kMaxModels * 2 - 1)) == 0, "slot count is a power of 2");

ModelRegistry::ModelRegistry() : slots_(new std::atomic<const Entry*>[kSlots]) {
  for (size_t i = 0; i < kSlots; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
}

ModelRegistry::~ModelRegistry() = default;

std::optional<ModelKey> ModelRegistry::find(std::string_view name) const noexcept {
  for (size_t i = slotOf(name, kSlots);; i = (i + 1) & (kSlots - 1)) {
    const Entry* entry = slots_[i].load(std::memory_order_acquire);
    if (entry == nullptr) return std::nullopt;
    if (entry->name == name) return entry->key;
  }
}

std::optional<ModelKey> ModelRegistry::findOrAdd(std::string_view name) {
  if (auto key = find(name)) return key;
  std::lock_guard lock(write_mutex_);
  size_t i = slotOf(name, kSlots);
  for (;; i = (i + 1) & (kSlots - 1)) {
    const Entry* entry = slots_[i].load(std::memory_order_relaxed);
    if (entry == nullptr) break;
    if (entry->name == name) return entry->key;  // added by another thread since our lock-free look
  }
  const size_t count = count_.load(std::memory_order_relaxed);
  if (count >= kMaxModels) return std::nullopt;
  entries_.push_back(std::make_unique<Entry>(Entry{std::string(name), static_cast<ModelKey>(count)}));
  slots_[i].store(entries_.back().get(), std::memory_order_release);
  count_.store(count + 1, std::memory_order_release);
  return static_cast<ModelKey>(count);
}

size_t ModelRegistry::memoryBytes() const {
  std::lock_guard lock(write_mutex_);
  size_t bytes = sizeof(*this) + kSlots * sizeof(slots_[0]) + entries_.capacity() * sizeof(entries_[0]);
  for (const auto& entry : entries_) bytes += sizeof(Entry) + entry->name.capacity();
  return bytes;
}

}  // namespace prefixgate::index
