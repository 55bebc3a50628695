#pragma once
// Small blocks of the request path (Beast header fields, the relay's bookkeeping, coroutine frames:
// util/coroutine_frames.h) recycled per thread: a steady stream of requests takes its blocks from the thread's
// free lists instead of malloc. Blocks are plain malloc
// blocks, so one freed on another thread (a coroutine frame destroyed at shutdown) simply joins that thread's
// lists or goes back to free(). Each list keeps at most kRecycledBlocksPerClass blocks, so a burst does not
// leave its memory behind.
#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <utility>

namespace prefixgate::util {

inline constexpr size_t kRecycledBlocksPerClass = 256;

// Blocks up to kMaxRecycledBytes come from six size classes (64, 128, ..., 2,048 bytes); larger ones from malloc.
// At most kRecycledBlocksPerClass x 4,032 bytes (about 1 MiB) kept per thread.
inline constexpr size_t kMaxRecycledBytes = 2048;
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

// One object in a recycled block (its size must fit a class for that to save a malloc): for what would make a
// coroutine frame larger than the 1,020 bytes asio recycles.
struct RecycledDelete {
  template <class T>
  void operator()(T* object) const noexcept {
    object->~T();
    recycledDeallocate(object, sizeof(T));
  }
};
template <class T>
using RecycledPtr = std::unique_ptr<T, RecycledDelete>;
template <class T, class... Args>
RecycledPtr<T> makeRecycled(Args&&... args) {
  static_assert(alignof(T) <= alignof(std::max_align_t));
  void* block = recycledAllocate(sizeof(T));
  try {
    return RecycledPtr<T>(new (block) T(std::forward<Args>(args)...));
  } catch (...) {
    recycledDeallocate(block, sizeof(T));
    throw;
  }
}

// A string whose buffer (beyond its in-place characters) comes from the thread's recycled blocks.
using RecycledString = std::basic_string<char, std::char_traits<char>, RecyclingAllocator<char>>;

}  // namespace prefixgate::util
