#include "index/block_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

namespace prefixgate::index {
namespace {

constexpr Tick kNoExpiry = (Tick{1} << 31) - 1;

std::set<uint32_t> podsOf(const BlockStore& store, const BlockKey& key, bool* present = nullptr) {
  std::set<uint32_t> out;
  const bool found = store.visit(key, [&](const TouchEntry& e) { out.insert(e.pod); });
  if (present) *present = found;
  return out;
}

// A plainly written model of the store: block -> pods, and an LRU list by last update.
struct Reference {
  std::map<uint64_t, std::set<uint32_t>> pods;
  std::list<uint64_t> lru;  // front = most recent
  size_t budget;

  void record(uint64_t block, uint32_t pod) {
    if (pods.count(block) == 0 && pods.size() >= budget) {
      pods.erase(lru.back());
      lru.pop_back();
    }
    pods[block].insert(pod);
    lru.remove(block);
    lru.push_front(block);
  }
  size_t entries() const {
    size_t n = 0;
    for (const auto& [block, set] : pods) n += set.size();
    return n;
  }
};

// Ensures the store agrees with a plain model under random records at full load: table shifts, evictions in LRU
// order, and entries spilling past the inline ones and back.
TEST(BlockStore, AgreesWithReferenceUnderRandomRecords) {
  PodTombstones removed;
  constexpr uint32_t kBudget = 500;
  BlockStore store(kBudget);
  Reference reference{{}, {}, kBudget};
  std::mt19937_64 rng(7);
  Tick now = 1;
  for (int op = 0; op < 40000; ++op) {
    ++now;  // a new tick per record, so every refresh moves its block in the LRU, as in the reference
    const uint64_t block = rng() % 1500;
    const uint32_t pod = static_cast<uint32_t>(rng() % 6);
    ASSERT_TRUE(store.record(makeBlockKey(BlockHash{block}, 0), pod, Liveness{now, kNoExpiry, &removed}));
    reference.record(block, pod);
    ASSERT_EQ(store.blocks(), reference.pods.size());
    ASSERT_EQ(store.entries(), reference.entries());
    if (op % 1000 == 0) {
      for (uint64_t b = 0; b < 1500; ++b) {
        bool present = false;
        const auto got = podsOf(store, makeBlockKey(BlockHash{b}, 0), &present);
        const auto it = reference.pods.find(b);
        ASSERT_EQ(present, it != reference.pods.end()) << "block " << b;
        if (present) {
          ASSERT_EQ(got, it->second) << "block " << b;
        }
      }
    }
  }
}

// Ensures the same hash under two model keys is two blocks.
TEST(BlockStore, ModelIsPartOfTheKey) {
  PodTombstones removed;
  BlockStore store(10);
  const Liveness live{1, kNoExpiry, &removed};
  store.record(makeBlockKey(BlockHash{5}, 0), 1, live);
  store.record(makeBlockKey(BlockHash{5}, 1), 2, live);
  EXPECT_EQ(store.blocks(), 2u);
  EXPECT_EQ(podsOf(store, makeBlockKey(BlockHash{5}, 0)), (std::set<uint32_t>{1}));
  EXPECT_EQ(podsOf(store, makeBlockKey(BlockHash{5}, 1)), (std::set<uint32_t>{2}));
}

// Ensures reclaim frees expired blocks from the tail and stops at the first live one, within its step budget.
TEST(BlockStore, ReclaimFreesExpiredTailWithinBudget) {
  PodTombstones removed;
  BlockStore store(100);
  for (uint64_t b = 0; b < 10; ++b) store.record(makeBlockKey(BlockHash{b}, 0), 1, Liveness{0, 100, &removed});
  store.record(makeBlockKey(BlockHash{99}, 0), 1, Liveness{150, 100, &removed});
  EXPECT_EQ(store.blocks(), 9u);  // the insert itself reclaimed two
  store.reclaim(Liveness{150, 100, &removed}, 3, 0);
  EXPECT_EQ(store.blocks(), 6u);  // exactly three more
  store.reclaim(Liveness{150, 100, &removed}, 100, 0);
  EXPECT_EQ(store.blocks(), 1u);  // stops at block 99, still live
}

// Ensures the sweep drops entries of removed pods inside blocks still held by live pods.
TEST(BlockStore, SweepDropsRemovedPodsEntries) {
  PodTombstones removed;
  BlockStore store(100);
  const Liveness live{1, kNoExpiry, &removed};
  for (uint64_t b = 0; b < 4; ++b) {
    for (uint32_t pod = 0; pod < 6; ++pod) store.record(makeBlockKey(BlockHash{b}, 0), pod, live);
  }
  EXPECT_EQ(store.entries(), 24u);
  for (uint32_t pod = 0; pod < 5; ++pod) removed.add(PodId{pod});
  store.reclaim(live, 0, 4);
  EXPECT_EQ(store.entries(), 4u);
  EXPECT_EQ(store.blocks(), 4u);
  EXPECT_EQ(podsOf(store, makeBlockKey(BlockHash{2}, 0)), (std::set<uint32_t>{5}));
}

// Ensures a full table of random 64-bit hashes stays consistent through many evictions (probe limits hold).
TEST(BlockStore, RandomHashesAtFullLoad) {
  PodTombstones removed;
  constexpr uint32_t kBudget = 20000;
  BlockStore store(kBudget);
  std::mt19937_64 rng(11);
  std::vector<uint64_t> recent;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t h = rng();
    ASSERT_TRUE(store.record(makeBlockKey(BlockHash{h}, 0), 1, Liveness{static_cast<Tick>(i), kNoExpiry, &removed}));
    recent.push_back(h);
  }
  EXPECT_EQ(store.blocks(), kBudget);
  // The last kBudget hashes are exactly the ones kept.
  for (size_t i = recent.size() - kBudget; i < recent.size(); ++i) {
    ASSERT_EQ(podsOf(store, makeBlockKey(BlockHash{recent[i]}, 0)).size(), 1u);
  }
  ASSERT_TRUE(podsOf(store, makeBlockKey(BlockHash{recent[recent.size() - kBudget - 1]}, 0)).empty());
}

}  // namespace
}  // namespace prefixgate::index
