// The KV event index: engine events re-hashed into the gateway's chain, per pod, per tier, so that a request
// hashed from the engine's own token ids matches exactly the blocks each pod's engine reported.
#include "routing/kv/kv_event_index.h"
#include "routing/prefix/prefix_services.h"

#include <gtest/gtest.h>

#include "index/block_hash.h"
#include "tokenize/tokenizer.h"
#include "unit/core/kv_fixtures.h"

namespace prefixgate::routing {
namespace {

constexpr uint32_t kBlock = 16;  // engine block size, tokens
constexpr uint64_t kSeed = 7;

using testing::FixedClock;
using testing::tokens;

// The gateway's hashes of a prompt given as engine token ids (what KV mode does with the remote tokenizer's ids).
std::vector<BlockHash> requestHashes(const std::vector<uint32_t>& ids) {
  std::vector<uint8_t> packed;
  tokenize::packTokenIds(ids, packed);
  return index::hashBlocks(packed, kBlock * tokenize::kTokenIdBytes, kSeed);
}

// A BlockStored of `blocks` blocks of `ids` starting at block `first`, with engine hashes base+i.
engine::KvBlockStored stored(const std::vector<uint32_t>& ids, size_t first, size_t blocks, uint64_t base,
                             std::optional<uint64_t> parent) {
  engine::KvBlockStored event;
  for (size_t i = 0; i < blocks; ++i) event.block_hashes.push_back(EngineBlockHash{base + first + i});
  if (parent) event.parent = EngineBlockHash{*parent};
  event.token_ids.assign(ids.begin() + first * kBlock, ids.begin() + (first + blocks) * kBlock);
  event.block_size = kBlock;
  return event;
}

using testing::batch;

class KvEventIndexTest : public ::testing::Test {
 protected:
  KvEventIndexTest() : index_(KvEventIndexOptions{1000, 0.5, kSeed, 1, {}}, clock_) {}
  std::vector<uint32_t> matchOf(const std::vector<uint32_t>& ids, std::vector<PodId> pods, std::string model = "m") {
    std::vector<uint32_t> out(pods.size(), 99);
    index_.match(model, requestHashes(ids), pods, out);
    return out;
  }
  FixedClock clock_;
  KvEventIndex index_;
};

// Ensures blocks stored in two events (the second chained to the first through its parent) match a request
// hashed from the same token ids, for the publishing pod only.
TEST_F(KvEventIndexTest, StoredBlocksMatchRequestHashes) {
  const auto ids = tokens(100, 4 * kBlock + 3);
  auto applied = index_.apply(PodId{1}, "m", batch({stored(ids, 0, 2, 1000, std::nullopt)}));
  EXPECT_EQ(applied.blocks_stored, 2u);
  index_.apply(PodId{1}, "m", batch({stored(ids, 2, 2, 1000, 1001)}));
  EXPECT_EQ(matchOf(ids, {PodId{1}, PodId{2}}), (std::vector<uint32_t>{4, 0}));
  EXPECT_EQ(index_.podBlockTokens(PodId{1}), kBlock);
  EXPECT_EQ(index_.podBlocks(PodId{1}), 4u);
  // Another model's requests see nothing.
  EXPECT_EQ(matchOf(ids, {PodId{1}}, "other"), (std::vector<uint32_t>{0}));
}

// Ensures a BlockRemoved removes the block for the pod that sent it only, ending that pod's prefix there.
TEST_F(KvEventIndexTest, RemovedOnlyForTheSender) {
  const auto ids = tokens(0, 3 * kBlock);
  index_.apply(PodId{1}, "m", batch({stored(ids, 0, 3, 500, std::nullopt)}));
  index_.apply(PodId{2}, "m", batch({stored(ids, 0, 3, 900, std::nullopt)}));
  engine::KvBlockRemoved removed;
  removed.block_hashes = {EngineBlockHash{501}};
  auto applied = index_.apply(PodId{1}, "m", batch({removed}));
  EXPECT_EQ(applied.blocks_removed, 1u);
  EXPECT_EQ(matchOf(ids, {PodId{1}, PodId{2}}), (std::vector<uint32_t>{1, 3}));
  removed.block_hashes = {EngineBlockHash{12345}};
  EXPECT_EQ(index_.apply(PodId{1}, "m", batch({removed})).unknown_removals, 1u);
}

// Ensures a block whose parent the pod never announced cannot be placed (orphan), and an AllBlocksCleared or a
// reset forgets everything the pod had.
TEST_F(KvEventIndexTest, OrphansAndClears) {
  const auto ids = tokens(0, 3 * kBlock);
  EXPECT_EQ(index_.apply(PodId{1}, "m", batch({stored(ids, 1, 2, 0, 777)})).orphan_blocks, 2u);
  EXPECT_EQ(matchOf(ids, {PodId{1}}), (std::vector<uint32_t>{0}));
  index_.apply(PodId{1}, "m", batch({stored(ids, 0, 3, 0, std::nullopt)}));
  EXPECT_EQ(matchOf(ids, {PodId{1}}), (std::vector<uint32_t>{3}));
  EXPECT_EQ(index_.apply(PodId{1}, "m", batch({engine::KvAllBlocksCleared{}})).clears, 1u);
  EXPECT_EQ(matchOf(ids, {PodId{1}}), (std::vector<uint32_t>{0}));
  index_.apply(PodId{1}, "m", batch({stored(ids, 0, 3, 0, std::nullopt)}));
  index_.resetPod(PodId{1});
  EXPECT_EQ(matchOf(ids, {PodId{1}}), (std::vector<uint32_t>{0}));
  EXPECT_EQ(index_.podBlocks(PodId{1}), 0u);
}

// Ensures blocks under a LoRA adapter match only requests naming the adapter, and blocks with extra keys
// (multimodal, cache salt) never match a plain prompt.
TEST_F(KvEventIndexTest, AdaptersAndExtraKeysAreSeparate) {
  const auto ids = tokens(0, 2 * kBlock);
  auto lora = stored(ids, 0, 2, 10, std::nullopt);
  lora.lora_name = "my-adapter";
  index_.apply(PodId{1}, "base", batch({lora}));
  EXPECT_EQ(matchOf(ids, {PodId{1}}, "base"), (std::vector<uint32_t>{0}));
  EXPECT_EQ(matchOf(ids, {PodId{1}}, "my-adapter"), (std::vector<uint32_t>{2}));
  auto salted = stored(ids, 0, 2, 20, std::nullopt);
  salted.extra_keys = {0xabc, 0};
  index_.apply(PodId{2}, "base", batch({salted}));
  EXPECT_EQ(matchOf(ids, {PodId{2}}, "base"), (std::vector<uint32_t>{0}));
}

// Ensures CPU-tier blocks beyond the GPU ones count half, other groups and media are not indexed, and each
// data-parallel rank is its own view (the pod matches as its best rank).
TEST_F(KvEventIndexTest, TiersGroupsAndRanks) {
  const auto ids = tokens(0, 4 * kBlock);
  index_.apply(PodId{1}, "m", batch({stored(ids, 0, 2, 0, std::nullopt)}));
  auto offloaded = stored(ids, 0, 4, 100, std::nullopt);
  offloaded.medium = engine::KvMedium::kCpu;
  index_.apply(PodId{1}, "m", batch({offloaded}));
  EXPECT_EQ(matchOf(ids, {PodId{1}}), (std::vector<uint32_t>{3}));  // 2 GPU + (4 - 2) x 0.5
  auto group1 = stored(ids, 0, 4, 200, std::nullopt);
  group1.group_idx = 1;
  EXPECT_EQ(index_.apply(PodId{2}, "m", batch({group1})).ignored_blocks, 4u);
  auto disk = stored(ids, 0, 4, 300, std::nullopt);
  disk.medium = engine::KvMedium::kOther;
  EXPECT_EQ(index_.apply(PodId{2}, "m", batch({disk})).ignored_blocks, 4u);
  EXPECT_EQ(matchOf(ids, {PodId{2}}), (std::vector<uint32_t>{0}));
  const KvPodLimits two_ranks{2, 0};
  index_.apply(PodId{3}, "m", batch({stored(ids, 0, 1, 400, std::nullopt)}, 0), two_ranks);
  index_.apply(PodId{3}, "m", batch({stored(ids, 0, 4, 500, std::nullopt)}, 1), two_ranks);
  EXPECT_EQ(matchOf(ids, {PodId{3}}), (std::vector<uint32_t>{4}));
  index_.removePod(PodId{3});
  EXPECT_EQ(matchOf(ids, {PodId{3}}), (std::vector<uint32_t>{0}));
}

// Ensures a pod whose event view outgrows the index's capacity (a publisher that never removes) keeps no more than
// the index holds, the head of its chain, rather than growing without bound.
TEST(KvEventIndexBound, OverflowingPodKeepsWhatTheIndexHolds) {
  FixedClock clock;
  KvEventIndex index(KvEventIndexOptions{4, 0.5, kSeed, 1, {}}, clock);
  const auto ids = tokens(0, 5 * kBlock);
  KvApplied applied = index.apply(PodId{1}, "m", batch({stored(ids, 0, 5, 0, std::nullopt)}));
  EXPECT_EQ(applied.refusedFor(KvRefusal::kPodCapacity), 1u);
  EXPECT_EQ(index.podBlocks(PodId{1}), 4u);
  std::vector<uint32_t> out(1);
  index.match("m", requestHashes(ids), std::vector<PodId>{PodId{1}}, out);
  EXPECT_EQ(out[0], 4u);
}

// Ensures an event whose token count does not fit its blocks (null or masked blocks left out) is not indexed.
TEST_F(KvEventIndexTest, MismatchedTokenCountIsIgnored) {
  const auto ids = tokens(0, 2 * kBlock);
  auto event = stored(ids, 0, 2, 0, std::nullopt);
  event.block_hashes.pop_back();
  EXPECT_EQ(index_.apply(PodId{1}, "m", batch({event})).ignored_blocks, 1u);
  EXPECT_EQ(matchOf(ids, {PodId{1}}), (std::vector<uint32_t>{0}));
}

}  // namespace
}  // namespace prefixgate::routing

namespace prefixgate::routing {
namespace {

class SettableClock final : public Clock {
 public:
  SteadyTime now() const override { return now_; }
  void advance(std::chrono::milliseconds by) { now_ += by; }

 private:
  SteadyTime now_{};
};

// Ensures in KV event mode a routed request's blocks count for its pod while it waits for its engine to begin
// (however long, past speculative_ttl), and stop counting once the hold is released with no event confirming them.
TEST(PrefixServicesKv, PendingHoldCountsUntilTheEngineBegins) {
  SettableClock clock;
  PrefixServices services(std::make_unique<tokenize::CharacterTokenizer>(), 64, kSeed,
                          index::PrefixIndexOptions{1000, std::chrono::minutes(20), 1}, &clock);
  services.enableKvEvents(std::make_unique<KvEventIndex>(KvEventIndexOptions{1000, 0.5, kSeed, 1, {}}, clock),
                          KvModeOptions{std::chrono::milliseconds(2000), 10000});
  const auto hashes = requestHashes(tokens(0, 3 * kBlock));
  std::vector<Candidate> candidates(2);
  candidates[0].pod_id = PodId{1};
  candidates[1].pod_id = PodId{2};
  std::vector<PodId> scratch;
  std::vector<uint32_t> matched(2);
  auto hold = services.holdPending("m", hashes, PodId{1});
  ASSERT_TRUE(hold);
  clock.advance(std::chrono::seconds(30));  // queued far longer than speculative_ttl
  services.match("m", hashes, candidates, scratch, matched);
  EXPECT_EQ(matched, (std::vector<uint32_t>{3, 0}));
  hold.reset();
  services.match("m", hashes, candidates, scratch, matched);
  EXPECT_EQ(matched, (std::vector<uint32_t>{0, 0}));
}

}  // namespace
}  // namespace prefixgate::routing
