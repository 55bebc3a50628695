#pragma once
// Small blocks of the request path (Beast header fields, the relay's bookkeeping) recycled per thread: a steady
// stream of requests takes its blocks from the thread's free lists instead of malloc. Blocks are plain malloc
// blocks, so one freed on another thread (a coroutine frame destroyed at shutdown) simply joins that thread's
// lists or goes back to free(). Each list keeps at most kRecycledBlocksPerClass blocks, so a burst does not
// leave its memory behind.
#include <cstddef>
#include <new>

namespace prefixgate::util {

inline constexpr size_t kRecycledBlocksPerClass = 256;

// Blocks up to kMaxRecycledBytes come from four size classes (64, 128, 256, 512 bytes); larger ones from malloc.
inline constexpr size_t kMaxRecycledBytes = 512;
void* recycledAllocate(size_t bytes);
void recycledDeallocate(void* block, size_t bytes) noexcept;

// A stateless allocator over the thread's recycled blocks: all instances are equal (Beast's parsers need a
// default-constructible one). Alignment up to malloc's.
template <class T>
struct RecyclingAllocator {
  static_assert(alignof(T) <= alignof(std::max_align_t));
  using value_type = T;
  RecyclingAllocator() = default;
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(recycledAllocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { recycledDeallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const RecyclingAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace prefixgate::util
