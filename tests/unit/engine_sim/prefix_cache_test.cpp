#include "engine_sim/prefix_cache.h"

#include <gtest/gtest.h>

namespace prefixgate::sim {
namespace {

// Distinct fake block hashes: blocks(3, 100) = {100, 101, 102}.
std::vector<EngineBlockHash> blocks(size_t count, uint64_t first) {
  std::vector<EngineBlockHash> out;
  for (size_t i = 0; i < count; ++i) out.push_back(EngineBlockHash{first + i});
  return out;
}

// Ensures a prefix match counts leading resident blocks and stops at the first miss.
TEST(PrefixCache, MatchStopsAtFirstMiss) {
  PrefixCache cache(100);
  auto prompt = blocks(4, 10);
  ASSERT_TRUE(cache.pin(prompt, 0));
  cache.unpin(prompt, 0);
  EXPECT_EQ(cache.matchPrefix(prompt), 4u);
  auto changed = prompt;
  changed[2] = EngineBlockHash{999};
  EXPECT_EQ(cache.matchPrefix(changed), 2u);
  auto other = blocks(4, 50);
  EXPECT_EQ(cache.matchPrefix(other), 0u);
}

// Ensures shared blocks are stored once and stay resident after the sequences end.
TEST(PrefixCache, SharedBlocksCountedOnce) {
  PrefixCache cache(100);
  auto a = blocks(3, 10);
  ASSERT_TRUE(cache.pin(a, 0));
  ASSERT_TRUE(cache.pin(a, 0));
  EXPECT_EQ(cache.usedBlocks(), 3u);
  cache.unpin(a, 0);
  EXPECT_EQ(cache.usedBlocks(), 3u);  // still used by the second sequence
  cache.unpin(a, 0);
  EXPECT_EQ(cache.usedBlocks(), 0u);
  EXPECT_EQ(cache.evictableBlocks(), 3u);
  EXPECT_EQ(cache.residentBlocks(), 3u);
}

// Ensures the least recently used unpinned blocks are evicted at capacity, a prompt's tail before its head.
TEST(PrefixCache, EvictsLeastRecentlyUsedAtCapacity) {
  PrefixCache cache(4);
  auto a = blocks(2, 10);
  auto b = blocks(2, 20);
  ASSERT_TRUE(cache.pin(a, 0));
  cache.unpin(a, 0);
  ASSERT_TRUE(cache.pin(b, 0));
  cache.unpin(b, 0);
  EXPECT_EQ(cache.residentBlocks(), 4u);
  auto c = blocks(1, 30);
  ASSERT_TRUE(cache.pin(c, 0));  // evicts a's tail block (11), the least recently used
  EXPECT_TRUE(cache.contains(EngineBlockHash{10}));
  EXPECT_FALSE(cache.contains(EngineBlockHash{11}));
  EXPECT_EQ(cache.matchPrefix(a), 1u);
  EXPECT_EQ(cache.matchPrefix(b), 2u);
  EXPECT_EQ(cache.evictions(), 1u);
  EXPECT_LE(cache.residentBlocks(), cache.capacityBlocks());
}

// Ensures touching blocks again (a new sequence using them) makes them most recently used.
TEST(PrefixCache, ReuseRefreshesRecency) {
  PrefixCache cache(4);
  auto a = blocks(2, 10);
  auto b = blocks(2, 20);
  cache.pin(a, 0);
  cache.unpin(a, 0);
  cache.pin(b, 0);
  cache.unpin(b, 0);
  cache.pin(a, 0);  // a is now the most recent
  cache.unpin(a, 0);
  ASSERT_TRUE(cache.pin(blocks(2, 30), 0));
  EXPECT_EQ(cache.matchPrefix(a), 2u);
  EXPECT_EQ(cache.matchPrefix(b), 0u);
}

// Ensures pinned blocks are never evicted: a sequence that needs them waits (pin fails) instead.
TEST(PrefixCache, PinnedBlocksAreNotEvicted) {
  PrefixCache cache(4);
  auto running = blocks(3, 10);
  ASSERT_TRUE(cache.pin(running, 0));
  EXPECT_FALSE(cache.canPin(blocks(2, 20), 0));
  EXPECT_FALSE(cache.pin(blocks(2, 20), 0));
  EXPECT_EQ(cache.usedBlocks(), 3u);  // a failed pin changes nothing
  EXPECT_TRUE(cache.pin(blocks(1, 20), 0));
  for (const auto& block : running) EXPECT_TRUE(cache.isPinned(block));
  // Sharing already pinned blocks needs no room.
  EXPECT_TRUE(cache.canPin(running, 0));
}

// Ensures a sequence's missing blocks may evict its neighbours but never its own resident blocks.
TEST(PrefixCache, PinKeepsOwnResidentBlocks) {
  PrefixCache cache(3);
  auto prompt = blocks(3, 10);
  cache.pin(blocks(2, 10), 0);  // 10, 11 resident
  cache.unpin(blocks(2, 10), 0);
  cache.pin(blocks(1, 40), 0);  // 40 resident and most recent
  cache.unpin(blocks(1, 40), 0);
  ASSERT_TRUE(cache.pin(prompt, 0));  // needs 12: evicts 40, keeps 10 and 11
  EXPECT_TRUE(cache.isPinned(EngineBlockHash{10}));
  EXPECT_TRUE(cache.isPinned(EngineBlockHash{11}));
  EXPECT_FALSE(cache.contains(EngineBlockHash{40}));
}

// Ensures usage is the used (pinned shared + private) fraction of capacity, as vLLM reports it.
TEST(PrefixCache, UsageCountsPinnedAndPrivateBlocks) {
  PrefixCache cache(10);
  auto prompt = blocks(3, 10);
  ASSERT_TRUE(cache.pin(prompt, 2));
  EXPECT_EQ(cache.usedBlocks(), 5u);
  EXPECT_DOUBLE_EQ(cache.usage(), 0.5);
  cache.unpin(prompt, 2);
  EXPECT_DOUBLE_EQ(cache.usage(), 0.0);  // cached blocks are free to reuse
  EXPECT_EQ(cache.residentBlocks(), 3u);
  EXPECT_FALSE(cache.canPin(blocks(1, 90), 10));  // private blocks count against capacity too
}

}  // namespace
}  // namespace prefixgate::sim
