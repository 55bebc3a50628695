#include "index/pod_tombstones.h"

namespace prefixgate::index {
namespace {

constexpr uint64_t kPresentBit = uint64_t{1} << 32;
constexpr size_t kInitialSlots = 64;

inline size_t slotOf(uint32_t pod, size_t mask) {
  return static_cast<size_t>((uint64_t{pod} * 0x9E3779B97F4A7C15ULL) >> 32) & mask;
}

}  // namespace

PodTombstones::Table::Table(size_t slot_count) : mask(slot_count - 1), slots(new std::atomic<uint64_t>[slot_count]) {
  for (size_t i = 0; i < slot_count; ++i) slots[i].store(0, std::memory_order_relaxed);
}

PodTombstones::PodTombstones() {
  tables_.push_back(std::make_unique<Table>(kInitialSlots));
  current_.store(tables_.back().get(), std::memory_order_release);
}

PodTombstones::~PodTombstones() = default;

bool PodTombstones::insertInto(Table& table, uint32_t pod) {
  const uint64_t value = kPresentBit | pod;
  for (size_t i = slotOf(pod, table.mask);; i = (i + 1) & table.mask) {
    const uint64_t slot = table.slots[i].load(std::memory_order_relaxed);
    if (slot == value) return false;
    if (slot == 0) {
      table.slots[i].store(value, std::memory_order_release);
      return true;
    }
  }
}

bool PodTombstones::add(PodId pod) {
  std::lock_guard lock(write_mutex_);
  if (contains(pod)) return false;
  Table* table = tables_.back().get();
  const size_t count = count_.load(std::memory_order_relaxed);
  // Keep the load at or under one half so probes stay short for the lock-free readers.
  if ((count + 1) * 2 > table->mask + 1) {
    auto grown = std::make_unique<Table>((table->mask + 1) * 2);
    for (size_t i = 0; i <= table->mask; ++i) {
      const uint64_t slot = table->slots[i].load(std::memory_order_relaxed);
      if (slot != 0) insertInto(*grown, static_cast<uint32_t>(slot));
    }
    table = grown.get();
    tables_.push_back(std::move(grown));
  }
  insertInto(*table, pod.value);
  current_.store(table, std::memory_order_release);
  count_.store(count + 1, std::memory_order_release);
  return true;
}

bool PodTombstones::contains(PodId pod) const noexcept {
  if (count_.load(std::memory_order_acquire) == 0) return false;  // the common case: nothing removed yet
  const Table* table = current_.load(std::memory_order_acquire);
  const uint64_t value = kPresentBit | pod.value;
  for (size_t i = slotOf(pod.value, table->mask);; i = (i + 1) & table->mask) {
    const uint64_t slot = table->slots[i].load(std::memory_order_acquire);
    if (slot == value) return true;
    if (slot == 0) return false;
  }
}

size_t PodTombstones::memoryBytes() const {
  std::lock_guard lock(write_mutex_);
  size_t bytes = sizeof(*this) + tables_.capacity() * sizeof(tables_[0]);
  for (const auto& table : tables_) bytes += sizeof(Table) + (table->mask + 1) * sizeof(uint64_t);
  return bytes;
}

}  // namespace prefixgate::index
