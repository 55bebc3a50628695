#include "index/prefix_index.h"

#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "unit/index/manual_clock.h"

namespace prefixgate::index {
namespace {

using namespace std::chrono_literals;
using testing::ManualClock;

std::vector<BlockHash> chain(std::initializer_list<uint64_t> values) {
  std::vector<BlockHash> out;
  for (uint64_t v : values) out.push_back(BlockHash{v});
  return out;
}

std::vector<BlockHash> range(uint64_t first, size_t count) {
  std::vector<BlockHash> out;
  for (size_t i = 0; i < count; ++i) out.push_back(BlockHash{first + i});
  return out;
}

std::vector<PodId> pods(std::initializer_list<uint32_t> values) {
  std::vector<PodId> out;
  for (uint32_t v : values) out.push_back(PodId{v});
  return out;
}

class PrefixIndexTest : public ::testing::Test {
 protected:
  PrefixIndexTest() : index_(PrefixIndexOptions{1000, 20min, 1}, clock_) {}

  // Runs match and returns the per-candidate counts.
  std::vector<uint32_t> matchOf(const PrefixIndex& index, std::string_view model, const std::vector<BlockHash>& hashes,
                                const std::vector<PodId>& candidates) {
    std::vector<uint32_t> out(candidates.size(), 12345);
    const uint32_t longest = index.match(model, hashes, candidates, out);
    EXPECT_EQ(longest, out.empty() ? 0 : *std::max_element(out.begin(), out.end()));
    return out;
  }
  std::vector<uint32_t> matchOf(std::string_view model, const std::vector<BlockHash>& hashes,
                                const std::vector<PodId>& candidates) {
    return matchOf(index_, model, hashes, candidates);
  }

  ManualClock clock_;
  PrefixIndex index_;
};

// Ensures match walks blocks in order and stops at the first block no candidate holds, even if later ones are held.
TEST_F(PrefixIndexTest, WalksInOrderAndStopsAtFirstUnheldBlock) {
  index_.record("m", chain({1, 2, 3}), PodId{1});
  EXPECT_EQ(matchOf("m", chain({1, 2, 99, 3}), pods({1})), (std::vector<uint32_t>{2}));
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), pods({1})), (std::vector<uint32_t>{3}));
  EXPECT_EQ(matchOf("m", chain({99, 1, 2, 3}), pods({1})), (std::vector<uint32_t>{0}));
}

// Ensures each pod gets its own leading count when pods hold prefixes of different lengths.
TEST_F(PrefixIndexTest, PerPodCountsDifferByHeldLength) {
  index_.record("m", chain({1, 2, 3, 4}), PodId{1});
  index_.record("m", chain({1, 2}), PodId{2});
  index_.record("m", chain({2, 3, 4}), PodId{3});  // holds later blocks but not the first: no prefix
  EXPECT_EQ(matchOf("m", chain({1, 2, 3, 4}), pods({1, 2, 3, 4})), (std::vector<uint32_t>{4, 2, 0, 0}));
}

// Ensures a pod that skips a block stops counting there, even if it holds the block after it.
TEST_F(PrefixIndexTest, GapEndsAPodsMatch) {
  index_.record("m", chain({1, 2, 3}), PodId{1});
  index_.record("m", chain({1, 3}), PodId{2});
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), pods({1, 2})), (std::vector<uint32_t>{3, 1}));
}

// Ensures pods outside the candidate list never count and never extend the walk.
TEST_F(PrefixIndexTest, OnlyCandidatesCount) {
  index_.record("m", chain({1, 2, 3}), PodId{7});
  index_.record("m", chain({1}), PodId{1});
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), pods({1, 2})), (std::vector<uint32_t>{1, 0}));
}

// Ensures empty inputs are handled: no hashes, no candidates, a short output span.
TEST_F(PrefixIndexTest, EmptyInputs) {
  index_.record("m", chain({1, 2}), PodId{1});
  EXPECT_EQ(matchOf("m", {}, pods({1})), (std::vector<uint32_t>{0}));
  EXPECT_EQ(matchOf("m", chain({1, 2}), {}), (std::vector<uint32_t>{}));
  EXPECT_TRUE(index_.record("m", {}, PodId{1}));
  const auto candidates = pods({1, 2});
  std::vector<uint32_t> out(1, 9);
  EXPECT_EQ(index_.match("m", chain({1, 2}), candidates, out), 2u);  // only as many candidates as outputs
  EXPECT_EQ(out[0], 2u);
}

// Ensures the same block hash recorded under one model never matches under another.
TEST_F(PrefixIndexTest, ModelsAreIsolated) {
  index_.record("a", chain({1, 2, 3}), PodId{1});
  EXPECT_EQ(matchOf("b", chain({1, 2, 3}), pods({1})), (std::vector<uint32_t>{0}));
  index_.record("b", chain({1, 2}), PodId{2});
  EXPECT_EQ(matchOf("a", chain({1, 2, 3}), pods({1, 2})), (std::vector<uint32_t>{3, 0}));
  EXPECT_EQ(matchOf("b", chain({1, 2, 3}), pods({1, 2})), (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(index_.size(), 5u);  // blocks 1, 2 exist once per model
}

// Ensures match of a model never recorded returns zeros and registers nothing (a pure read).
TEST_F(PrefixIndexTest, UnknownModelMatchesNothing) {
  EXPECT_EQ(matchOf("never", chain({1}), pods({1})), (std::vector<uint32_t>{0}));
  EXPECT_EQ(index_.size(), 0u);
}

// Ensures an entry stops matching once older than the expiry, and not before.
TEST_F(PrefixIndexTest, ExpiredEntriesNeverMatch) {
  index_.record("m", chain({1, 2}), PodId{1});
  clock_.advance(20min - 1s);
  EXPECT_EQ(matchOf("m", chain({1, 2}), pods({1})), (std::vector<uint32_t>{2}));
  clock_.advance(2s);
  EXPECT_EQ(matchOf("m", chain({1, 2}), pods({1})), (std::vector<uint32_t>{0}));
}

// Ensures record refreshes the touch time, while match does not.
TEST_F(PrefixIndexTest, RecordRefreshesAndMatchDoesNot) {
  index_.record("m", chain({1, 2}), PodId{1});
  index_.record("m", chain({1, 2}), PodId{2});
  clock_.advance(15min);
  index_.record("m", chain({1, 2}), PodId{1});  // refresh pod 1 only
  matchOf("m", chain({1, 2}), pods({1, 2}));    // reading must not refresh pod 2
  clock_.advance(10min);                        // 25 min after the first record
  EXPECT_EQ(matchOf("m", chain({1, 2}), pods({1, 2})), (std::vector<uint32_t>{2, 0}));
}

// Ensures expired blocks are reclaimed a little at a time by later records, without any full scan call.
TEST_F(PrefixIndexTest, ExpiredBlocksReclaimedIncrementally) {
  index_.record("m", range(1000, 100), PodId{1});
  EXPECT_EQ(index_.size(), 100u);
  clock_.advance(21min);
  for (uint64_t i = 0; i < 60; ++i) index_.record("m", chain({i}), PodId{2});
  EXPECT_EQ(index_.size(), 60u);  // every expired block gone, only the fresh ones left
}

// Ensures a full index evicts the least recently updated block, counting refreshes as updates.
TEST_F(PrefixIndexTest, CapacityEvictsLeastRecentlyUpdated) {
  ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{3, 20min, 64}, clock);
  ASSERT_EQ(index.shardCount(), 1u);  // tiny indexes get one shard, hence an exact LRU
  for (uint64_t h : {1, 2, 3}) {
    index.record("m", chain({h}), PodId{1});
    clock.advance(1s);
  }
  index.record("m", chain({1}), PodId{2});  // block 1 is now the most recently updated; block 2 the least
  clock.advance(1s);
  index.record("m", chain({4}), PodId{1});
  EXPECT_EQ(index.size(), 3u);
  EXPECT_EQ(matchOf(index, "m", chain({2}), pods({1})), (std::vector<uint32_t>{0}));
  for (uint64_t h : {1, 3, 4}) EXPECT_EQ(matchOf(index, "m", chain({h}), pods({1})), (std::vector<uint32_t>{1}));
}

// Ensures a prompt recorded into a full index keeps its first blocks: its tail is evicted before its head.
TEST_F(PrefixIndexTest, EvictionKeepsThePromptHead) {
  ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{4, 20min, 1}, clock);
  index.record("m", chain({5, 6}), PodId{1});
  clock.advance(1s);
  index.record("m", chain({7, 8}), PodId{1});  // the index is full
  clock.advance(1s);
  index.record("m", chain({1, 2}), PodId{1});  // evicts 5 and 6, the least recently updated
  EXPECT_EQ(matchOf(index, "m", chain({1, 2}), pods({1})), (std::vector<uint32_t>{2}));
  EXPECT_EQ(matchOf(index, "m", chain({7, 8}), pods({1})), (std::vector<uint32_t>{2}));
  EXPECT_EQ(matchOf(index, "m", chain({5}), pods({1})), (std::vector<uint32_t>{0}));
}

// Ensures one prompt longer than the whole index records only its head (half the capacity) and cannot flush the
// blocks of every other model.
TEST_F(PrefixIndexTest, HugePromptDoesNotFlushOtherModels) {
  ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{100, 20min, 1}, clock);
  index.record("a", range(1, 20), PodId{1});
  clock.advance(1s);
  index.record("b", range(1000, 5000), PodId{2});
  EXPECT_EQ(matchOf(index, "a", range(1, 20), pods({1})), (std::vector<uint32_t>{20}));
  EXPECT_EQ(matchOf(index, "b", range(1000, 5000), pods({2})), (std::vector<uint32_t>{50}));
  EXPECT_EQ(index.maxBlocksPerRecord(), 50u);
}

// Ensures the capacity is global over models, not per model.
TEST_F(PrefixIndexTest, CapacityCountsAllModels) {
  ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{4, 20min, 1}, clock);
  index.record("a", chain({1, 2, 3}), PodId{1});
  index.record("b", chain({1, 2, 3}), PodId{1});
  EXPECT_EQ(index.size(), 4u);
}

// Ensures removePod stops the pod matching at once, ignores its later records, and leaves other pods working.
TEST_F(PrefixIndexTest, RemovedPodStopsMatchingAtOnce) {
  index_.record("m", chain({1, 2, 3}), PodId{1});
  index_.record("m", chain({1, 2}), PodId{2});
  index_.removePod(PodId{1});
  EXPECT_TRUE(index_.isRemoved(PodId{1}));
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), pods({1, 2})), (std::vector<uint32_t>{0, 2}));
  EXPECT_FALSE(index_.record("m", chain({1, 2, 3}), PodId{1}));
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), pods({1})), (std::vector<uint32_t>{0}));
  EXPECT_TRUE(index_.record("m", chain({1, 2, 3, 4}), PodId{2}));
  EXPECT_EQ(matchOf("m", chain({1, 2, 3, 4}), pods({2, 1})), (std::vector<uint32_t>{4, 0}));
}

// Ensures a removed pod's entries are reclaimed by later records, including inside blocks other pods keep fresh.
TEST_F(PrefixIndexTest, RemovedPodEntriesReclaimedIncrementally) {
  index_.record("m", range(1, 100), PodId{1});
  index_.record("m", range(1, 50), PodId{2});
  EXPECT_EQ(index_.entryCount(), 150u);
  index_.removePod(PodId{1});
  EXPECT_EQ(index_.entryCount(), 150u);  // lazy: nothing reclaimed by removePod itself
  int calls = 0;
  while (index_.entryCount() > 50 && calls < 20) {
    index_.record("m", range(1, 50), PodId{2});  // refreshes only: reclamation rides along every few
    ++calls;
  }
  EXPECT_EQ(index_.entryCount(), 50u) << "after " << calls << " records";
  EXPECT_EQ(index_.size(), 50u);
}

// Ensures blocks held by many pods (entries spilled past the inline ones) count and match every pod.
TEST_F(PrefixIndexTest, BlocksHeldByManyPods) {
  std::vector<PodId> all;
  for (uint32_t p = 1; p <= 10; ++p) {
    index_.record("m", chain({1, 2}), PodId{p});
    all.push_back(PodId{p});
  }
  index_.record("m", chain({1, 2, 3}), PodId{4});
  EXPECT_EQ(index_.size(), 3u);
  EXPECT_EQ(index_.entryCount(), 21u);
  std::vector<uint32_t> expected(10, 2);
  expected[3] = 3;
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), all), expected);
  for (uint32_t p = 1; p <= 8; ++p) index_.removePod(PodId{p});
  index_.record("m", chain({1, 2}), PodId{9});  // the visits drop the removed pods' entries of blocks 1 and 2
  EXPECT_EQ(index_.entryCount(), 4u + 1u);      // pods 9 and 10 there; pod 4's entry on block 3 waits
  for (int i = 0; i < 4; ++i) index_.record("m", chain({1, 2}), PodId{9});  // ... for the sweep
  EXPECT_EQ(index_.entryCount(), 4u);
  EXPECT_EQ(index_.size(), 2u);
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), all), (std::vector<uint32_t>{0, 0, 0, 0, 0, 0, 0, 0, 2, 2}));
}

// Ensures more candidates than fit inline (the per-thread buffer path) give the same answers.
TEST_F(PrefixIndexTest, ThousandCandidates) {
  std::vector<PodId> candidates;
  for (uint32_t p = 0; p < 1000; ++p) candidates.push_back(PodId{p * 7 + 3});
  index_.record("m", range(1, 8), PodId{3});            // candidate 0
  index_.record("m", range(1, 5), PodId{999 * 7 + 3});  // candidate 999
  index_.record("m", range(1, 2), PodId{500 * 7 + 3});  // candidate 500
  std::vector<uint32_t> out(candidates.size());
  EXPECT_EQ(index_.match("m", range(1, 8), candidates, out), 8u);
  std::vector<uint32_t> expected(1000, 0);
  expected[0] = 8;
  expected[999] = 5;
  expected[500] = 2;
  EXPECT_EQ(out, expected);
}

// Ensures a widely held first block (more than kFewHolders pods: the candidate-map path) gives the same answers,
// with removed and repeated candidates, on the stack (<= 64 candidates) and in the per-thread buffer (more).
TEST_F(PrefixIndexTest, WidelyHeldFirstBlock) {
  for (uint32_t p = 0; p < 40; ++p) index_.record("m", chain({1, 2}), PodId{p});
  for (uint32_t p = 0; p < 20; ++p) index_.record("m", chain({1, 2, 3}), PodId{p});
  index_.record("m", chain({1, 2, 3, 4}), PodId{5});
  index_.removePod(PodId{7});
  for (size_t extra : {size_t{0}, size_t{900}}) {
    std::vector<PodId> candidates;
    for (uint32_t p = 0; p < 45; ++p) candidates.push_back(PodId{p});  // 40..44 hold nothing
    for (size_t i = 0; i < extra; ++i) candidates.push_back(PodId{static_cast<uint32_t>(1000 + i)});
    candidates.push_back(PodId{5});  // repeated
    std::vector<uint32_t> expected(candidates.size(), 0);
    for (uint32_t p = 0; p < 40; ++p) expected[p] = p < 20 ? 3 : 2;
    expected[5] = 4;
    expected[7] = 0;
    expected.back() = 4;
    EXPECT_EQ(matchOf("m", chain({1, 2, 3, 4, 5}), candidates), expected) << extra << " extra candidates";
  }
}

// Ensures a pod listed twice among the candidates gets the same count in both places.
TEST_F(PrefixIndexTest, RepeatedCandidateGetsSameCount) {
  index_.record("m", chain({1, 2}), PodId{1});
  EXPECT_EQ(matchOf("m", chain({1, 2}), pods({1, 2, 1})), (std::vector<uint32_t>{2, 0, 2}));
}

// Ensures bad options are refused with an error naming the field, and shard counts are adjusted as documented.
TEST(PrefixIndexOptionsTest, ValidatesAndAdjustsShards) {
  ManualClock clock;
  EXPECT_THROW(PrefixIndex(PrefixIndexOptions{0, 20min, 64}, clock), std::invalid_argument);
  EXPECT_THROW(PrefixIndex(PrefixIndexOptions{10, 0min, 64}, clock), std::invalid_argument);
  EXPECT_THROW(PrefixIndex(PrefixIndexOptions{10, 20min, 0}, clock), std::invalid_argument);
  try {
    PrefixIndex index(PrefixIndexOptions{10, -1min, 64}, clock);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("expiry"), std::string::npos);
  }
  EXPECT_EQ(PrefixIndex(PrefixIndexOptions{200000, 20min, 64}, clock).shardCount(), 64u);
  EXPECT_EQ(PrefixIndex(PrefixIndexOptions{200000, 20min, 100}, clock).shardCount(), 64u);
  EXPECT_EQ(PrefixIndex(PrefixIndexOptions{1000, 20min, 64}, clock).shardCount(), 8u);
  EXPECT_EQ(PrefixIndex(PrefixIndexOptions{10, 20min, 64}, clock).shardCount(), 1u);
  EXPECT_EQ(PrefixIndex(PrefixIndexOptions{4'000'000, 20min, 1}, clock).shardCount(), 4u);
}

// Ensures the index never holds more blocks than its capacity, over many shards and uneven shard loads.
TEST(PrefixIndexCapacityTest, NeverExceedsCapacity) {
  ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{5000, 20min, 16}, clock);
  for (uint64_t i = 0; i < 400; ++i) index.record("m", range(i * 100, 100), PodId{static_cast<uint32_t>(i % 7)});
  EXPECT_LE(index.size(), 5000u);
  EXPECT_GT(index.size(), 4900u);  // each shard fills to its own budget
}

// Ensures remove() drops one pod's entries of the given blocks only: the other pods keep theirs, the removed
// pod's prefix ends at the first removed block, and a block nobody holds any more is freed.
TEST_F(PrefixIndexTest, RemoveDropsOnePodsEntries) {
  index_.record("m", chain({1, 2, 3}), PodId{1});
  index_.record("m", chain({1, 2}), PodId{2});
  EXPECT_EQ(index_.remove("m", chain({2, 3}), PodId{1}), 2u);
  EXPECT_EQ(matchOf("m", chain({1, 2, 3}), pods({1, 2})), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(index_.size(), 2u);  // block 3 was held by pod 1 alone
  EXPECT_EQ(index_.remove("m", chain({3}), PodId{1}), 0u);     // already gone
  EXPECT_EQ(index_.remove("other", chain({1}), PodId{2}), 0u);  // another model's blocks are separate
  EXPECT_EQ(matchOf("m", chain({1}), pods({2})), (std::vector<uint32_t>{1}));
}

// Ensures a match with max_age counts only entries touched within it, while a plain match still sees them all.
TEST_F(PrefixIndexTest, MaxAgeCountsOnlyRecentEntries) {
  index_.record("m", chain({1, 2}), PodId{1});
  clock_.advance(5s);
  index_.record("m", chain({1, 2}), PodId{2});
  std::vector<uint32_t> out(2);
  index_.match("m", chain({1, 2}), pods({1, 2}), out, std::chrono::seconds(2));
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 2}));
  EXPECT_EQ(matchOf("m", chain({1, 2}), pods({1, 2})), (std::vector<uint32_t>{2, 2}));
  clock_.advance(3s);
  index_.match("m", chain({1, 2}), pods({1, 2}), out, std::chrono::seconds(2));
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 0}));
}

// Ensures an index built with kNeverExpire keeps matching entries far past any expiry, even across the touch
// clock's wrap-around, while a max_age still limits a match.
TEST(PrefixIndexNeverExpire, EntriesNeverExpire) {
  ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{100, PrefixIndex::kNeverExpire, 1}, clock);
  index.record("m", chain({1, 2}), PodId{1});
  clock.advance(std::chrono::hours(24 * 600));
  std::vector<uint32_t> out(1);
  index.match("m", chain({1, 2}), pods({1}), out);
  EXPECT_EQ(out[0], 2u);
  index.match("m", chain({1, 2}), pods({1}), out, std::chrono::seconds(1));
  EXPECT_EQ(out[0], 0u);
  index.record("m", chain({3}), PodId{2});  // writes reclaim at the LRU tail: nothing counts as expired
  index.match("m", chain({1, 2}), pods({1}), out);
  EXPECT_EQ(out[0], 2u);
}

}  // namespace
}  // namespace prefixgate::index
