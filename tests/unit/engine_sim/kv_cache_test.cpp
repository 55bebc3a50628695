// The paged KV cache with prefix caching: allocation, registration, release order and eviction.
#include "engine_sim/kv_cache.h"

#include <gtest/gtest.h>

namespace prefixgate::sim {
namespace {

std::vector<EngineBlockHash> hashes(std::initializer_list<uint64_t> values) {
  std::vector<EngineBlockHash> out;
  for (uint64_t v : values) out.push_back(EngineBlockHash{v});
  return out;
}

// Fills `count` fresh blocks and registers them under `values`.
std::vector<BlockId> computeBlocks(KvCache& cache, std::initializer_list<uint64_t> values) {
  std::vector<BlockId> blocks;
  EXPECT_TRUE(cache.allocate(values.size(), blocks));
  size_t i = 0;
  for (uint64_t v : values) cache.registerBlock(blocks[i++], EngineBlockHash{v});
  return blocks;
}

// Ensures released full blocks stay findable (cached) and count as free, and usage counts referenced blocks only.
TEST(KvCache, ReleasedBlocksStayCachedAndFree) {
  KvCache cache(4);
  std::vector<BlockId> blocks = computeBlocks(cache, {1, 2, 3});
  EXPECT_DOUBLE_EQ(cache.usage(), 0.75);
  EXPECT_EQ(cache.longestHit(hashes({1, 2, 3, 4})), 3u);
  cache.release(blocks);
  EXPECT_DOUBLE_EQ(cache.usage(), 0.0);
  EXPECT_EQ(cache.freeBlocks(), 4u);
  EXPECT_EQ(cache.cachedFreeBlocks(), 3u);
  EXPECT_EQ(cache.longestHit(hashes({1, 2, 3})), 3u);
  EXPECT_EQ(cache.longestHit(hashes({1, 9, 3})), 1u);  // the run stops at the first missing hash
}

// Ensures acquiring cached blocks takes them out of the free queue (no longer evictable).
TEST(KvCache, AcquiredCachedBlocksAreNotEvicted) {
  KvCache cache(3);
  cache.release(computeBlocks(cache, {1, 2}));
  std::vector<BlockId> held;
  EXPECT_EQ(cache.freeAmong(hashes({1, 2})), 2u);
  cache.acquireCached(hashes({1}), held);
  EXPECT_EQ(cache.freeBlocks(), 2u);
  EXPECT_EQ(cache.freeAmong(hashes({1, 2})), 1u);
  std::vector<BlockId> fresh;
  ASSERT_TRUE(cache.allocate(2, fresh));  // the never-used block, then cached block 2 is evicted
  EXPECT_EQ(cache.longestHit(hashes({1})), 1u);
  EXPECT_EQ(cache.longestHit(hashes({1, 2})), 1u);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_FALSE(cache.allocate(1, fresh));  // everything is referenced now
}

// Ensures a sequence's blocks are freed last one first, so its tail is evicted before its head.
TEST(KvCache, TailEvictedBeforeHead) {
  KvCache cache(3);
  cache.release(computeBlocks(cache, {10, 11, 12}));
  std::vector<BlockId> fresh;
  ASSERT_TRUE(cache.allocate(1, fresh));
  EXPECT_EQ(cache.longestHit(hashes({10, 11, 12})), 2u);  // block 12 (the tail) went first
  ASSERT_TRUE(cache.allocate(1, fresh));
  EXPECT_EQ(cache.longestHit(hashes({10, 11, 12})), 1u);
}

// Ensures least recently freed blocks are evicted first across sequences.
TEST(KvCache, LeastRecentlyFreedEvictedFirst) {
  KvCache cache(2);
  std::vector<BlockId> a = computeBlocks(cache, {1});
  std::vector<BlockId> b = computeBlocks(cache, {2});
  cache.release(b);
  cache.release(a);  // a freed last: most recently used
  std::vector<BlockId> fresh;
  ASSERT_TRUE(cache.allocate(1, fresh));
  EXPECT_EQ(cache.longestHit(hashes({1})), 1u);
  EXPECT_EQ(cache.longestHit(hashes({2})), 0u);
}

// Ensures a block computed twice at once (same hash) keeps the hash findable when the first copy is evicted.
TEST(KvCache, StandInKeepsHashWhenFirstCopyEvicted) {
  KvCache cache(3);
  std::vector<BlockId> first = computeBlocks(cache, {7});
  std::vector<BlockId> second = computeBlocks(cache, {7});  // the same tokens, computed by another sequence
  EXPECT_EQ(cache.registeredBlocks(), 1u);
  cache.release(first);
  std::vector<BlockId> fresh;
  ASSERT_TRUE(cache.allocate(2, fresh));  // the unused block, then the first copy
  EXPECT_EQ(cache.longestHit(hashes({7})), 1u);  // still held by the second sequence
  EXPECT_EQ(cache.evictions(), 0u);
  cache.release(second);
  EXPECT_EQ(cache.cachedFreeBlocks(), 1u);
  ASSERT_TRUE(cache.allocate(1, fresh));
  EXPECT_EQ(cache.longestHit(hashes({7})), 0u);
  EXPECT_EQ(cache.evictions(), 1u);
}

}  // namespace
}  // namespace prefixgate::sim
