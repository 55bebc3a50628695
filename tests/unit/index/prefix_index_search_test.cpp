// match() and record() of a chained PrefixIndex search a prompt's blocks instead of visiting each one; these
// tests hold them to the block-by-block answers under random, seeded workloads: records, removals of single
// blocks and of pods, evictions under a small capacity, expiry and max_age, a few pods and many.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "index/block_hash.h"
#include "index/prefix_index.h"
#include "unit/index/manual_clock.h"

namespace prefixgate::index {
namespace {

using namespace std::chrono_literals;
using testing::ManualClock;

constexpr char kModel[] = "m";
constexpr size_t kFamilies = 6;        // prompts of one family share their first kSharedBlocks blocks
constexpr size_t kVariants = 4;
constexpr size_t kSharedBlocks = 24;
constexpr size_t kPromptBlocks = 40;
constexpr size_t kBlockBytes = 4;
constexpr auto kExpiry = 2s;           // 200 touch ticks

struct Shape {
  size_t capacity;
  size_t shards;
  uint32_t pods;  // more than PrefixIndex::kFewHolders takes match() down its other path too
};

// Real chains (index::hashBlocks over bytes), so that a hash stands behind the same blocks wherever it appears.
std::vector<std::vector<BlockHash>> prompts(std::mt19937_64& rng) {
  std::vector<std::vector<BlockHash>> out;
  for (size_t f = 0; f < kFamilies; ++f) {
    std::string shared(kSharedBlocks * kBlockBytes, '\0');
    for (char& c : shared) c = static_cast<char>(rng());
    for (size_t v = 0; v < kVariants; ++v) {
      std::string text = shared;
      while (text.size() < kPromptBlocks * kBlockBytes) text += static_cast<char>(rng());
      out.push_back(hashBlocks({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, kBlockBytes, 0));
    }
  }
  return out;
}

// The plain definition: a pod's match is the number of leading blocks it holds, asked one block at a time.
uint32_t linearMatch(const PrefixIndex& index, const std::vector<BlockHash>& hashes, PodId pod,
                     std::optional<std::chrono::nanoseconds> max_age) {
  uint32_t n = 0;
  while (n < hashes.size() && index.holds(kModel, hashes[n], pod, max_age)) ++n;
  return n;
}

// One random step of the workload, applied to every index given (the same step for each).
struct Workload {
  Workload(uint64_t seed, uint32_t pod_count, bool with_removals) : rng(seed), removals(with_removals) {
    chains = prompts(rng);
    for (uint32_t p = 0; p < pod_count; ++p) pods.push_back(PodId{p});
    next_pod = pod_count;
  }

  std::mt19937_64 rng;
  std::vector<std::vector<BlockHash>> chains;
  std::vector<PodId> pods;  // the pods in service; a removed one is replaced by a new id, as the gateway does
  uint32_t next_pod;
  std::optional<PodId> last_removed;
  bool removals;  // removePod and expiry steps

  size_t pick(size_t n) { return static_cast<size_t>(rng() % n); }
  PodId anyPod() { return pods[pick(pods.size())]; }

  void step(ManualClock& clock, std::initializer_list<PrefixIndex*> indexes) {
    const size_t kind = pick(100);
    if (kind < 55) {  // a prefix of a prompt routed to a pod
      const auto& chain = chains[pick(chains.size())];
      const size_t length = 1 + pick(chain.size());
      const PodId pod = anyPod();
      for (PrefixIndex* index : indexes) index->record(kModel, std::span(chain).first(length), pod);
    } else if (kind < 65) {  // a run of blocks dropped for one pod, anywhere in a chain (breaks it in the middle)
      const auto& chain = chains[pick(chains.size())];
      const size_t from = pick(chain.size());
      const size_t count = 1 + pick(3);
      const PodId pod = anyPod();
      for (PrefixIndex* index : indexes)
        index->remove(kModel, std::span(chain).subspan(from, std::min(count, chain.size() - from)), pod);
    } else if (kind < 66 && removals) {
      PodId& pod = pods[pick(pods.size())];
      for (PrefixIndex* index : indexes) index->removePod(pod);
      last_removed = pod;
      pod = PodId{next_pod++};
    } else if (kind < 90) {
      clock.advance(PrefixIndex::kTouchTick);
    } else if (kind < 99) {
      clock.advance(PrefixIndex::kTouchTick * (2 + pick(40)));
    } else if (removals) {
      clock.advance(kExpiry / 2 + PrefixIndex::kTouchTick * pick(100));  // older records start to expire
    }
  }

  // Candidates: a random subset of the pods, sometimes with a pod twice or the last removed one.
  std::vector<PodId> candidates() {
    std::vector<PodId> out;
    for (PodId p : pods)
      if (pick(3) != 0) out.push_back(p);
    if (!out.empty() && pick(4) == 0) out.push_back(out[pick(out.size())]);
    if (last_removed && pick(4) == 0) out.push_back(*last_removed);
    return out;
  }
};

// Returns (through `longest_out`) the longest match, so that a test can see its workload left some to check.
void checkAgainstLinear(const PrefixIndex& index, Workload& w, size_t step, uint32_t& longest_out) {
  const auto& chain = w.chains[w.pick(w.chains.size())];
  const std::vector<PodId> candidates = w.candidates();
  std::optional<std::chrono::nanoseconds> max_age;
  if (w.pick(4) == 0) max_age = PrefixIndex::kTouchTick * w.pick(60);
  std::vector<uint32_t> matched(candidates.size(), 12345);
  const uint32_t longest = index.match(kModel, chain, candidates, matched, max_age);
  uint32_t expected_longest = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const uint32_t expected = linearMatch(index, chain, candidates[i], max_age);
    ASSERT_EQ(matched[i], expected) << "step " << step << ", pod " << candidates[i].value;
    expected_longest = std::max(expected_longest, expected);
  }
  ASSERT_EQ(longest, expected_longest) << "step " << step;
  longest_out = longest;
}

class PrefixIndexSearch : public ::testing::TestWithParam<Shape> {};

// Ensures a chained index's match() gives every candidate exactly the block-by-block count, whatever removals,
// evictions and expiry did to the chains in between (8,000 steps per seed, a match checked after each).
// Also with a refresh interval, where records leave recent blocks unwritten.
TEST_P(PrefixIndexSearch, MatchEqualsBlockByBlock) {
  const Shape shape = GetParam();
  for (uint64_t seed : {1, 2, 3}) {
    ManualClock clock;
    const std::chrono::nanoseconds refresh = seed == 3 ? PrefixIndex::kTouchTick * 5 : 0ns;
    PrefixIndex index(PrefixIndexOptions{shape.capacity, kExpiry, shape.shards, true, refresh}, clock);
    Workload w(seed * 7919 + shape.capacity, shape.pods, true);
    size_t long_matches = 0;
    for (size_t step = 0; step < 8000; ++step) {
      w.step(clock, {&index});
      uint32_t longest = 0;
      ASSERT_NO_FATAL_FAILURE(checkAgainstLinear(index, w, step, longest)) << "seed " << seed;
      long_matches += longest > kSharedBlocks / 2 ? 1 : 0;
    }
    EXPECT_GT(long_matches, 100u) << "the workload should leave long matches to check";
  }
}

// Ensures holders() names exactly the pods with a block-by-block match and their counts (removed pods and pods with
// none left out) whenever few pods hold the first block, and declines (false) only when more than kFewHolders do.
TEST_P(PrefixIndexSearch, HoldersEqualBlockByBlock) {
  const Shape shape = GetParam();
  for (uint64_t seed : {6, 7}) {
    ManualClock clock;
    PrefixIndex index(PrefixIndexOptions{shape.capacity, kExpiry, shape.shards, true, 0ns}, clock);
    Workload w(seed * 7919 + shape.capacity, shape.pods, true);
    size_t answered = 0;
    size_t held = 0;
    std::vector<std::pair<PodId, uint32_t>> holders;
    for (size_t step = 0; step < 4000; ++step) {
      w.step(clock, {&index});
      const auto& chain = w.chains[w.pick(w.chains.size())];
      std::vector<PodId> every = w.pods;
      if (w.last_removed) every.push_back(*w.last_removed);
      size_t first_holders = 0;
      std::vector<std::pair<PodId, uint32_t>> expected;
      for (PodId pod : every) {
        const uint32_t n = linearMatch(index, chain, pod, std::nullopt);
        if (n > 0) expected.emplace_back(pod, n);
        first_holders += n > 0 ? 1 : 0;
      }
      if (!index.holders(kModel, chain, holders)) {
        ASSERT_TRUE(holders.empty());
        ASSERT_GT(first_holders, PrefixIndex::kFewHolders) << "step " << step;
        continue;
      }
      ++answered;
      held += holders.size();
      std::sort(holders.begin(), holders.end());
      std::sort(expected.begin(), expected.end());
      ASSERT_EQ(holders, expected) << "seed " << seed << ", step " << step;
    }
    EXPECT_GT(answered, 1000u);
    EXPECT_GT(held, answered / 2) << "the workload should leave holders to name";
  }
}

// Ensures a chained index ends up holding exactly what an unchained one (which refreshes every block of every
// record) holds after the same records, block removals and evictions: leaving the blocks a pod holds from this
// tick unwritten changes nothing a match can see. (No pod removals or expiry here: with dead entries around, the
// two reclaim at different paces, which legitimately changes which blocks a full shard evicts.)
TEST_P(PrefixIndexSearch, RecordAgreesWithRefreshingEveryBlock) {
  const Shape shape = GetParam();
  for (uint64_t seed : {4, 5}) {
    ManualClock clock;
    // An expiry the run cannot reach (it advances the clock by about 2 minutes).
    PrefixIndex chained(PrefixIndexOptions{shape.capacity, 20min, shape.shards, true}, clock);
    PrefixIndex plain(PrefixIndexOptions{shape.capacity, 20min, shape.shards, false}, clock);
    Workload w(seed * 7919 + shape.capacity, shape.pods, false);
    for (size_t step = 0; step < 6000; ++step) {
      w.step(clock, {&chained, &plain});
      ASSERT_EQ(chained.size(), plain.size()) << "seed " << seed << ", step " << step;
      ASSERT_EQ(chained.entryCount(), plain.entryCount()) << "seed " << seed << ", step " << step;
      const auto& chain = w.chains[w.pick(w.chains.size())];
      const std::vector<PodId> candidates = w.candidates();
      std::vector<uint32_t> got(candidates.size()), want(candidates.size());
      chained.match(kModel, chain, candidates, got);
      plain.match(kModel, chain, candidates, want);
      ASSERT_EQ(got, want) << "seed " << seed << ", step " << step;
    }
  }
}

std::vector<BlockHash> chainOf(std::string_view text) {
  return hashBlocks({reinterpret_cast<const uint8_t*>(text.data()), text.size()}, kBlockBytes, 0);
}

// Ensures a record within the refresh interval leaves the blocks as they were (their expiry still counts from the
// earlier record), and a record after it rewrites them.
TEST(PrefixIndexRefresh, RecordWithinTheIntervalLeavesTheBlocksAndAfterItRewritesThem) {
  const std::vector<BlockHash> chain = chainOf("0123456789abcdefghijklmnopqrstuvwxyzABCD");  // 10 blocks
  const std::vector<PodId> pod{PodId{1}};
  std::vector<uint32_t> matched(1);
  for (auto refresh : {0ms, 100ms}) {
    ManualClock clock;
    PrefixIndex index(PrefixIndexOptions{1000, 1s, 1, true, refresh}, clock);
    index.record(kModel, chain, pod[0]);
    clock.advance(50ms);
    index.record(kModel, chain, pod[0]);  // within 100 ms of the first
    clock.advance(960ms);                 // 1.01 s after the first record, 0.96 s after the second
    index.match(kModel, chain, pod, matched);
    EXPECT_EQ(matched[0], refresh == 0ms ? chain.size() : 0u) << "refresh interval " << refresh.count() << " ms";
  }
  ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{1000, 1s, 1, true, 100ms}, clock);
  index.record(kModel, chain, pod[0]);
  clock.advance(150ms);
  index.record(kModel, chain, pod[0]);  // past the interval: rewritten
  clock.advance(900ms);                 // 1.05 s after the first record
  index.match(kModel, chain, pod, matched);
  EXPECT_EQ(matched[0], chain.size());
}

// Ensures that when a record's new blocks evict blocks it left unwritten (touched a few ticks ago, within the
// interval), those are written again: the index ends up as one that rewrites every block.
TEST(PrefixIndexRefresh, BlocksLeftUnwrittenButEvictedByTheRecordAreWrittenAgain) {
  const std::string shared = "shared-prefix-24";  // 4 blocks
  const std::vector<BlockHash> first = chainOf(shared);
  const std::vector<BlockHash> second = chainOf(shared + "a new tail of 32 bytes, 8 blocks");
  ASSERT_EQ(second.size(), 12u);
  const std::vector<PodId> pod{PodId{1}};
  std::vector<uint32_t> got(1), want(1);
  ManualClock clock;
  // One shard: an exact LRU of 24 blocks (a record stores at most 12).
  PrefixIndex interval(PrefixIndexOptions{24, 1min, 1, true, 100ms}, clock);
  PrefixIndex every(PrefixIndexOptions{24, 1min, 1, false}, clock);
  for (PrefixIndex* index : {&interval, &every}) {
    index->record(kModel, first, pod[0]);
    // Two other prompts fill the index, so the shared blocks are now its least recently updated.
    index->record(kModel, chainOf("filler number one, forty bytes long...."), PodId{2});
    index->record(kModel, chainOf("filler number two, forty bytes long...."), PodId{2});
  }
  clock.advance(PrefixIndex::kTouchTick * 2);
  // The new tail's 8 blocks evict the 4 shared blocks (then 4 of the first filler's).
  for (PrefixIndex* index : {&interval, &every}) index->record(kModel, second, pod[0]);
  interval.match(kModel, second, pod, got);
  every.match(kModel, second, pod, want);
  EXPECT_EQ(want[0], 12u);
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(interval.size(), every.size());
}

TEST(PrefixIndexRefresh, IntervalNotShorterThanTheExpiryIsRefused) {
  ManualClock clock;
  EXPECT_THROW(PrefixIndex(PrefixIndexOptions{1000, 1s, 1, true, 1s}, clock), std::invalid_argument);
  EXPECT_THROW(PrefixIndex(PrefixIndexOptions{1000, 1s, 1, true, -1ms}, clock), std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefixIndexSearch,
                         ::testing::Values(Shape{64, 1, 6},        // one shard: an exact LRU, evicting all the time
                                           Shape{300, 4, 8},       // a few shards, each evicting on its own
                                           Shape{4000, 8, 24}),    // room to spare; first blocks held by 16+ pods
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "Capacity" + std::to_string(info.param.capacity) + "Pods" +
                                  std::to_string(info.param.pods);
                         });

}  // namespace
}  // namespace prefixgate::index
