#include <gtest/gtest.h>
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "index/prefix_index.h"
#include "unit/index/manual_clock.h"

namespace prefixgate::index {
namespace {

using namespace std::chrono_literals;

constexpr size_t kBlocks = 1'000'000;
constexpr size_t kBlocksPerRecord = 128;

// Bytes handed out by malloc: arena chunks plus separately mmapped large blocks.
size_t heapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

struct Measured {
  double malloc_bytes_per_entry;
  double accounted_bytes_per_entry;
  size_t entries;
};

// Records kBlocks distinct blocks, each held by `pods_per_block` pods, into an index sized for them, and
// measures the heap growth (glibc's mallinfo2, so malloc's own overhead is included) per (block, pod) entry.
Measured measure(uint32_t pods_per_block) {
  testing::ManualClock clock;
  std::vector<BlockHash> hashes(kBlocksPerRecord);
  const size_t before = heapInUse();
  auto index = std::make_unique<PrefixIndex>(PrefixIndexOptions{kBlocks, 20min, 64}, clock);
  for (size_t first = 0; first < kBlocks; first += kBlocksPerRecord) {
    for (size_t i = 0; i < kBlocksPerRecord; ++i) hashes[i] = BlockHash{(first + i) * 0x9E3779B97F4A7C15ULL};
    for (uint32_t p = 0; p < pods_per_block; ++p) {
      index->record("model", hashes, PodId{static_cast<uint32_t>((first / kBlocksPerRecord + p) % 64)});
    }
  }
  const size_t after = heapInUse();
  const size_t entries = index->entryCount();
  return Measured{static_cast<double>(after - before) / static_cast<double>(entries), index->bytesPerEntryEstimate(),
                  entries};
}

// Ensures a block held by one pod costs at most 64 bytes per entry, table and LRU links included (target 48).
TEST(PrefixIndexMemory, OnePodPerBlock) {
  const Measured m = measure(1);
  std::printf("one pod per block: %zu entries, %.1f bytes/entry by malloc, %.1f by the index's accounting\n", m.entries,
              m.malloc_bytes_per_entry, m.accounted_bytes_per_entry);
  RecordProperty("malloc_bytes_per_entry", std::to_string(m.malloc_bytes_per_entry));
  EXPECT_GT(m.entries, kBlocks * 98 / 100);  // per-shard budgets evict a little before the global capacity
  EXPECT_LE(m.malloc_bytes_per_entry, 64.0);
  EXPECT_LE(m.accounted_bytes_per_entry, 48.0);
}

// Ensures pods two and three of a block are stored inline at no extra cost.
TEST(PrefixIndexMemory, ThreePodsPerBlock) {
  const Measured m = measure(3);
  std::printf("three pods per block: %zu entries, %.1f bytes/entry by malloc, %.1f by the index's accounting\n",
              m.entries, m.malloc_bytes_per_entry, m.accounted_bytes_per_entry);
  EXPECT_LE(m.malloc_bytes_per_entry, 24.0);
}

}  // namespace
}  // namespace prefixgate::index
