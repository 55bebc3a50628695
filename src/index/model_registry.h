#pragma once
// Maps model names to small dense ids so that the index stores two bytes per block instead of a string, and so
// that the same block hash under two models is two different keys (models never see each other's blocks).
// Lookups are lock-free because every match() and record() does one; adding a model takes a mutex.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::index {

using ModelKey = uint16_t;

class ModelRegistry {
 public:
  // Ids are never freed (a gateway serves a handful of models), so the table has a fixed size.
  static constexpr size_t kMaxModels = 4096;

  ModelRegistry();
  ~ModelRegistry();
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // The id of `name`, or nullopt when it was never added. Lock-free; safe concurrently with add().
  std::optional<ModelKey> find(std::string_view name) const noexcept;

  // The id of `name`, adding it when new; nullopt when kMaxModels models already exist. Thread-safe.
  std::optional<ModelKey> findOrAdd(std::string_view name);

  size_t size() const noexcept { return count_.load(std::memory_order_acquire); }
  size_t memoryBytes() const;

 private:
  struct Entry {
    std::string name;
    ModelKey key;
  };
  static constexpr size_t kSlots = kMaxModels * 2;  // load <= 1/2 keeps probes short

  std::unique_ptr<std::atomic<const Entry*>[]> slots_;
  std::atomic<size_t> count_{0};
  mutable std::mutex write_mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;  // owns what slots_ points to
};

}  // namespace prefixgate::index
