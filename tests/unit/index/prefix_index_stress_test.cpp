#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "index/prefix_index.h"
#include "unit/index/manual_clock.h"

namespace prefixgate::index {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kPods = 24;  // pods 0..23 serve model "a", pods 100..123 model "b"
constexpr uint32_t kOtherModelPod = 100;
constexpr uint32_t kRemovedPods = 6;  // pods 0..5 are removed while the others work
constexpr size_t kPromptBlocks = 48;
constexpr size_t kCapacity = 4000;  // small, so eviction runs all the time
constexpr int kWriterOps = 4000;
constexpr int kReaderOps = 4000;

// Prompt v of family f: the first half shared by the family, the second half its own. Hashes differ per block.
std::vector<BlockHash> prompt(uint64_t family, uint64_t variant) {
  std::vector<BlockHash> out;
  for (size_t i = 0; i < kPromptBlocks; ++i) {
    const uint64_t owner = i < kPromptBlocks / 2 ? family * 1000 : family * 1000 + 1 + variant;
    out.push_back(BlockHash{(owner << 16 | i) * 0x9E3779B97F4A7C15ULL});
  }
  return out;
}

// Ensures concurrent record, match, removePod and a moving clock keep the invariants: counts within the prompt,
// the longest count returned, other models' pods never matching, removed pods matching nothing once removePod
// returned, and the capacity never exceeded. Run under TSan to catch data races.
TEST(PrefixIndexStress, ConcurrentRecordMatchRemove) {
  testing::ManualClock clock;
  PrefixIndex index(PrefixIndexOptions{kCapacity, 2s, 16}, clock);
  std::atomic<bool> removed[kPods] = {};
  std::atomic<int> failures{0};

  auto writer = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    for (int op = 0; op < kWriterOps; ++op) {
      const uint32_t pod = rng() % kPods;
      const auto hashes = prompt(rng() % 20, rng() % 4);
      index.record("a", hashes, PodId{pod});
      index.record("b", hashes, PodId{kOtherModelPod + pod});
      clock.advance(1ms);  // entries live ~1,000 writes: first blocks gather 16+ holders, and expiry still runs
    }
  };
  // More than kFewHolders pods may hold a first block, so both match paths run; `idle` extra candidates that
  // hold nothing take the second reader past kInlineCandidates.
  auto reader = [&](uint32_t seed, uint32_t idle) {
    std::mt19937 rng(seed);
    std::vector<PodId> candidates;
    for (uint32_t p = 0; p < kPods; ++p) candidates.push_back(PodId{p});
    for (uint32_t p = 0; p < kPods; ++p) candidates.push_back(PodId{kOtherModelPod + p});
    for (uint32_t p = 0; p < idle; ++p) candidates.push_back(PodId{5000 + p});
    std::vector<uint32_t> matched(candidates.size());
    for (int op = 0; op < kReaderOps; ++op) {
      bool removed_before[kPods];
      for (uint32_t p = 0; p < kPods; ++p) removed_before[p] = removed[p].load(std::memory_order_acquire);
      const auto hashes = prompt(rng() % 20, rng() % 4);
      const uint32_t longest = index.match("a", hashes, candidates, matched);
      bool ok = longest == *std::max_element(matched.begin(), matched.end()) && longest <= hashes.size();
      for (uint32_t p = 0; p < kPods; ++p) {
        ok = ok && matched[kPods + p] == 0;                  // model "b" pods never match model "a"
        ok = ok && !(removed_before[p] && matched[p] != 0);  // removed means gone, at once
      }
      for (size_t p = 2 * kPods; p < matched.size(); ++p) ok = ok && matched[p] == 0;  // never recorded
      if (!ok) failures.fetch_add(1);
      if (index.size() > kCapacity) failures.fetch_add(1);
    }
  };
  auto remover = [&] {
    for (uint32_t p = 0; p < kRemovedPods; ++p) {
      std::this_thread::yield();
      index.removePod(PodId{p});
      removed[p].store(true, std::memory_order_release);
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(writer, 1);
  threads.emplace_back(writer, 2);
  threads.emplace_back(reader, 3, 0);
  threads.emplace_back(reader, 4, 100);
  threads.emplace_back(remover);
  for (auto& t : threads) t.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(index.size(), kCapacity);
  // The index still works after the storm: a fresh record is matched in full, a removed pod is ignored.
  const auto hashes = prompt(77, 0);
  EXPECT_TRUE(index.record("a", hashes, PodId{kPods - 1}));
  EXPECT_FALSE(index.record("a", hashes, PodId{0}));
  std::vector<PodId> candidates = {PodId{0}, PodId{kPods - 1}};
  std::vector<uint32_t> matched(2);
  EXPECT_EQ(index.match("a", hashes, candidates, matched), kPromptBlocks);
  EXPECT_EQ(matched, (std::vector<uint32_t>{0, kPromptBlocks}));
}

}  // namespace
}  // namespace prefixgate::index
