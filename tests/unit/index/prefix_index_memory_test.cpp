#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include "index/prefix_index.h"
#include "unit/index/manual_clock.h"

namespace prefixgate::index {
namespace {

using namespace std::chrono_literals;

constexpr size_t kBlocks = 1'000'000;
constexpr size_t kBlocksPerRecord = 128;

// The layout the bounds below are derived from (src/index/block_store.h): every block is one 40-byte node
// (hash, LRU links, three inline (pod, touch) entries) plus its share of a hash table of 4-byte slots, 3 home
// slots per 2 blocks of *capacity*, allocated up front for the whole capacity. A block held by more than three
// pods keeps entries[0..1] inline and moves the rest to a spill list: a std::vector<TouchEntry> (8 bytes per
// entry) whose object lives in its shard's spills_ vector (24 bytes each, a vector that grows by doubling).
constexpr double kNodeBytes = static_cast<double>(BlockStore::kNodeBytes);
constexpr double kTableBytesPerCapacityBlock = 4.0 * 3 / 2;
constexpr double kTouchEntryBytes = sizeof(TouchEntry);
constexpr double kSpillListObjectBytes = sizeof(std::vector<TouchEntry>);
// Costs that do not grow with the blocks stored. Per shard, under 16 KiB: the partly used last 256-node slab
// chunk (at most 255 x 40 = 10,200 bytes unused), the chunk directory (62 pointers), the 32 table slots past the
// last home slot, the shard and store objects, the free-spill list (at most a record call's 128 blocks evicted
// at once). Per index, under 128 KiB: the model registry's 8,192-slot table, the tombstones.
constexpr double kFixedBytesPerShard = 16 * 1024;
constexpr double kFixedBytesPerIndex = 128 * 1024;
// malloc's own cost beyond the bytes asked for: a 16-byte header per slab chunk and table (under 0.01 bytes per
// block) and page rounding of the mmapped spills_ arrays; and a 32-byte request is a 48-byte chunk (8-byte
// header, 16-byte alignment), which is what a block's spill buffer of four entries asks for.
constexpr double kMallocSlackPerEntry = 0.1;
constexpr double kMallocChunkOverhead32 = 16.0;

// Bytes handed out by malloc: arena chunks plus separately mmapped large blocks.
size_t heapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// Under AddressSanitizer malloc is ASan's, which glibc's mallinfo2 does not see: only the index's own accounting
// is checked there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMallinfoSeesTheHeap = false;
#else
constexpr bool kMallinfoSeesTheHeap = true;
#endif

struct Measured {
  double malloc_bytes_per_entry;
  double accounted_bytes_per_entry;
  size_t entries;
  size_t blocks;
  size_t shards;

  double fixedBytesPerEntry() const {
    return (kFixedBytesPerIndex + kFixedBytesPerShard * static_cast<double>(shards)) / static_cast<double>(entries);
  }
  double tableBytesPerEntry() const {
    return kTableBytesPerCapacityBlock * static_cast<double>(kBlocks) / static_cast<double>(entries);
  }
};

// Records `blocks` distinct blocks, each held by `pods_per_block` pods, into an index sized for kBlocks, and
// measures the heap growth (glibc's mallinfo2, so malloc's own overhead is included) per (block, pod) entry.
Measured measure(uint32_t pods_per_block, size_t blocks = kBlocks) {
  testing::ManualClock clock;
  std::vector<BlockHash> hashes(kBlocksPerRecord);
  const size_t before = heapInUse();
  auto index = std::make_unique<PrefixIndex>(PrefixIndexOptions{kBlocks, 20min, 64}, clock);
  for (size_t first = 0; first < blocks; first += kBlocksPerRecord) {
    const size_t count = std::min(kBlocksPerRecord, blocks - first);
    for (size_t i = 0; i < count; ++i) hashes[i] = BlockHash{(first + i) * 0x9E3779B97F4A7C15ULL};
    for (uint32_t p = 0; p < pods_per_block; ++p) {
      index->record("model", std::span<const BlockHash>(hashes.data(), count),
                    PodId{static_cast<uint32_t>((first / kBlocksPerRecord + p) % 64)});
    }
  }
  const size_t after = heapInUse();
  const size_t entries = index->entryCount();
  return Measured{static_cast<double>(after - before) / static_cast<double>(entries), index->bytesPerEntryEstimate(),
                  entries, index->size(), index->shardCount()};
}

void report(const char* what, const Measured& m) {
  std::printf("%s: %zu blocks, %zu entries, %.3f bytes/entry by malloc%s, %.3f by the index's accounting\n", what,
              m.blocks, m.entries, m.malloc_bytes_per_entry, kMallinfoSeesTheHeap ? "" : " (not seen: sanitizer)",
              m.accounted_bytes_per_entry);
  ::testing::Test::RecordProperty("malloc_bytes_per_entry", std::to_string(m.malloc_bytes_per_entry));
  ::testing::Test::RecordProperty("accounted_bytes_per_entry", std::to_string(m.accounted_bytes_per_entry));
}

// Ensures a block held by one pod costs at most 64 bytes per entry, table and LRU links included (target 48).
TEST(PrefixIndexMemory, OnePodPerBlock) {
  const Measured m = measure(1);
  report("one pod per block", m);
  EXPECT_GT(m.entries, kBlocks * 98 / 100);  // per-shard budgets evict a little before the global capacity
  EXPECT_LE(m.malloc_bytes_per_entry, 64.0);
  EXPECT_LE(m.accounted_bytes_per_entry, 48.0);
}

// Ensures pods two and three of a block are stored inline at no extra cost.
TEST(PrefixIndexMemory, ThreePodsPerBlock) {
  const Measured m = measure(3);
  report("three pods per block", m);
  EXPECT_LE(m.malloc_bytes_per_entry, 24.0);
}

// Ensures an index filled to half its capacity evicts nothing and costs what its layout says per entry: the
// 40-byte node, plus the table, which is allocated for the full capacity, so at half load each stored block
// carries the slots of two blocks of capacity (2 x 6 = 12 bytes), plus the fixed costs (64 shards x 16 KiB +
// 128 KiB over 500,000 entries: 2.4 bytes): at most 54.4 bytes per entry (53.0 today). The index's accounting
// must agree with malloc to within malloc's own overhead.
TEST(PrefixIndexMemory, HalfFullIndex) {
  const Measured m = measure(1, kBlocks / 2);
  report("half-full index, one pod per block", m);
  // 64 shards with a budget of 15,625 blocks each receive ~7,800 blocks: none reaches its budget.
  EXPECT_EQ(m.blocks, kBlocks / 2);
  EXPECT_EQ(m.entries, kBlocks / 2);
  const double bound = kNodeBytes + m.tableBytesPerEntry() + m.fixedBytesPerEntry();
  std::printf("  bounds: %.3f by the accounting, %.3f by malloc\n", bound, bound + kMallocSlackPerEntry);
  EXPECT_LE(m.accounted_bytes_per_entry, bound);
  if (kMallinfoSeesTheHeap) {
    EXPECT_LE(m.malloc_bytes_per_entry, bound + kMallocSlackPerEntry);
    EXPECT_NEAR(m.malloc_bytes_per_entry, m.accounted_bytes_per_entry, kMallocSlackPerEntry);
  }
}

// Ensures pods four to six of a block cost one 8-byte spill entry each plus the spill list's own cost, and no
// more. Every block of six pods costs the 40-byte node; a spill buffer of exactly four entries (entries[2] moves
// there with pods four to six; the buffer grows 1 -> 2 -> 4), 32 bytes; and a 24-byte list object in its
// shard's spills_, whose capacity is a power of two no larger than the first one >= the shard budget (16,384 for
// 15,625), since a shard never holds more spilled blocks than its budget. Add the table (6 bytes per block of
// capacity) and the fixed costs, all over the entries:
//   by the index's accounting  (blocks x (40 + 32) + 6 x capacity + shards x 16,384 x 24 + fixed) / entries
//                              = 17.41 bytes per entry at most (17.31 today);
//   by malloc, which hands out a 48-byte chunk for each 32-byte buffer, 16 bytes more per block (2.67 per entry)
//                              and a little slack: 20.18 at most (20.03 today).
// One more pod-sized entry per block, or spill buffers one step larger, would exceed these.
TEST(PrefixIndexMemory, SixPodsPerBlock) {
  constexpr uint32_t kPods = 6;
  const Measured m = measure(kPods);
  report("six pods per block", m);
  EXPECT_GT(m.blocks, kBlocks * 98 / 100);
  EXPECT_EQ(m.entries, m.blocks * kPods);  // evictions take whole blocks: every stored block keeps its six pods
  const double entries = static_cast<double>(m.entries);
  const double blocks = static_cast<double>(m.blocks);
  const double spill_objects = static_cast<double>(m.shards * std::bit_ceil(kBlocks / m.shards)) *
                               kSpillListObjectBytes;
  const double accounted_bound = (blocks * (kNodeBytes + 4 * kTouchEntryBytes) + spill_objects) / entries +
                                 m.tableBytesPerEntry() + m.fixedBytesPerEntry();
  const double chunk_overhead = kMallocChunkOverhead32 * blocks / entries;
  std::printf("  bounds: %.3f by the accounting, %.3f by malloc\n", accounted_bound,
              accounted_bound + chunk_overhead + kMallocSlackPerEntry);
  EXPECT_LE(m.accounted_bytes_per_entry, accounted_bound);
  if (kMallinfoSeesTheHeap) {
    EXPECT_LE(m.malloc_bytes_per_entry, accounted_bound + chunk_overhead + kMallocSlackPerEntry);
    EXPECT_NEAR(m.malloc_bytes_per_entry, m.accounted_bytes_per_entry + chunk_overhead, kMallocSlackPerEntry);
  }
}

}  // namespace
}  // namespace prefixgate::index
