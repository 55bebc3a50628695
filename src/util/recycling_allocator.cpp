#include "util/recycling_allocator.h"

#include <array>
#include <bit>
#include <cstdlib>

namespace prefixgate::util {
namespace {

constexpr size_t kMinClassBytes = 64;
constexpr size_t kClasses = 6;  // 64, 128, 256, 512, 1,024, 2,048
static_assert(kMinClassBytes << (kClasses - 1) == kMaxRecycledBytes);

size_t classOf(size_t bytes) {
  return bytes <= kMinClassBytes ? 0 : std::bit_width((bytes - 1) / kMinClassBytes);
}

struct FreeBlock {
  FreeBlock* next;
};

struct FreeLists {
  std::array<FreeBlock*, kClasses> head{};
  std::array<size_t, kClasses> count{};
  ~FreeLists();
};

// Set when this thread's lists are destroyed (thread exit): later frees on it go straight to free().
thread_local bool lists_gone = false;
thread_local FreeLists lists;

FreeLists::~FreeLists() {
  lists_gone = true;
  for (FreeBlock* block : head) {
    while (block) {
      FreeBlock* next = block->next;
      std::free(block);
      block = next;
    }
  }
}

}  // namespace

void* recycledAllocate(size_t bytes) {
  // A recycled block is always its class's full size, whichever thread allocated or frees it.
  const size_t size = bytes > kMaxRecycledBytes ? bytes : kMinClassBytes << classOf(bytes);
  if (bytes <= kMaxRecycledBytes && !lists_gone) {
    const size_t c = classOf(bytes);
    if (FreeBlock* block = lists.head[c]) {
      lists.head[c] = block->next;
      --lists.count[c];
      return block;
    }
  }
  if (void* p = std::malloc(size)) return p;
  throw std::bad_alloc();
}

void recycledDeallocate(void* block, size_t bytes) noexcept {
  if (!block) return;
  if (bytes > kMaxRecycledBytes || lists_gone) {
    std::free(block);
    return;
  }
  const size_t c = classOf(bytes);
  if (lists.count[c] >= kRecycledBlocksPerClass) {
    std::free(block);
    return;
  }
  lists.head[c] = new (block) FreeBlock{lists.head[c]};
  ++lists.count[c];
}

}  // namespace prefixgate::util
