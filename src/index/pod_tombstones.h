#pragma once
// The set of pods removed from a PrefixIndex. Read on every match() and record(), written only by removePod(),
// so reads are lock-free (no shared counter is touched, nothing bounces between cores) and writes take a mutex.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::index {

class PodTombstones {
 public:
  PodTombstones();
  ~PodTombstones();
  PodTombstones(const PodTombstones&) = delete;
  PodTombstones& operator=(const PodTombstones&) = delete;

  // Adds `pod`; returns false when it was already present. Thread-safe; a contains() that happens after this
  // call returns sees the pod. Allocates (the set grows by doubling).
  bool add(PodId pod);

  // Lock-free, wait-free for a given table size; safe from any thread, concurrently with add().
  bool contains(PodId pod) const noexcept;

  size_t size() const noexcept { return count_.load(std::memory_order_acquire); }
  size_t memoryBytes() const;

 private:
  struct Table {
    explicit Table(size_t slot_count);
    size_t mask;
    std::unique_ptr<std::atomic<uint64_t>[]> slots;  // 0 = empty, else kPresentBit | pod id
  };
  static bool insertInto(Table& table, uint32_t pod);

  std::atomic<const Table*> current_;
  std::atomic<size_t> count_{0};
  mutable std::mutex write_mutex_;
  // Every table ever published stays alive until destruction: a reader may still be probing an old one, and
  // with doubling growth the retained ones add up to less than the current one.
  std::vector<std::unique_ptr<Table>> tables_;
};

}  // namespace prefixgate::index
