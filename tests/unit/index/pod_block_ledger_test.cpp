// Capacity-aware standard mode's ledger: per pod, least recently routed blocks beyond the pod's capacity drop out.
#include "index/pod_block_ledger.h"

#include <gtest/gtest.h>

#include <thread>

namespace prefixgate::index {
namespace {

std::vector<BlockHash> chain(std::initializer_list<uint64_t> values) {
  std::vector<BlockHash> out;
  for (uint64_t v : values) out.push_back(BlockHash{v});
  return out;
}

// Ensures nothing drops out while a pod holds no more than its capacity, and the oldest blocks drop out beyond it,
// a prompt's tail before its head.
TEST(PodBlockLedger, EvictsLeastRecentlyRoutedBeyondCapacity) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touch(PodId{1}, "m", chain({1, 2, 3}), 4, evicted);
  EXPECT_TRUE(evicted.empty());
  ledger.touch(PodId{1}, "m", chain({10, 11}), 4, evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].model, "m");
  EXPECT_EQ(evicted[0].hashes, chain({3}));  // the first prompt's tail
  EXPECT_EQ(ledger.blocks(PodId{1}), 4u);
}

// Ensures routing a block again makes it recent, so it outlives blocks routed in between.
TEST(PodBlockLedger, RoutingAgainRefreshes) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touch(PodId{1}, "m", chain({1, 2}), 3, evicted);
  ledger.touch(PodId{1}, "m", chain({5}), 3, evicted);
  ledger.touch(PodId{1}, "m", chain({1, 2}), 3, evicted);  // the shared prefix again
  ledger.touch(PodId{1}, "m", chain({7}), 3, evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hashes, chain({5}));
}

// Ensures pods and models are accounted separately, and an unknown capacity (0) evicts nothing.
TEST(PodBlockLedger, PodsAndModelsAreSeparate) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touch(PodId{1}, "a", chain({1, 2}), 2, evicted);
  ledger.touch(PodId{2}, "a", chain({1, 2}), 2, evicted);
  ledger.touch(PodId{1}, "b", chain({1}), 2, evicted);  // the same hash under another model is another block
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].model, "a");
  EXPECT_EQ(evicted[0].hashes, chain({2}));
  EXPECT_EQ(ledger.blocks(PodId{2}), 2u);
  evicted.clear();
  ledger.touch(PodId{3}, "a", chain({1, 2, 3, 4}), 0, evicted);
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(ledger.blocks(PodId{3}), 0u);
  ledger.removePod(PodId{1});
  EXPECT_EQ(ledger.blocks(PodId{1}), 0u);
}

// Ensures two threads routing to the same pod keep the ledger consistent (run under the sanitizers too).
TEST(PodBlockLedger, ConcurrentTouches) {
  PodBlockLedger ledger;
  auto work = [&](uint64_t base) {
    std::vector<PodBlockLedger::Evicted> evicted;
    for (uint64_t i = 0; i < 2000; ++i) ledger.touch(PodId{1}, "m", chain({base + i, base + i + 1}), 100, evicted);
  };
  std::thread a(work, 0), b(work, 1000000);
  a.join();
  b.join();
  EXPECT_EQ(ledger.blocks(PodId{1}), 100u);
}

}  // namespace
}  // namespace prefixgate::index
