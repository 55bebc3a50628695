// The KV event index per pod: each pod matched at its own engine block size, and one publisher's events (floods,
// undeclared ranks, adapter names, clears) kept within its own bounds so that they cannot hurt another pod.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "index/block_hash.h"
#include "routing/kv/kv_event_index.h"
#include "routing/prefix/prefix_services.h"
#include "tokenize/tokenizer.h"
#include "unit/core/kv_fixtures.h"

namespace prefixgate::routing {
namespace {

constexpr uint64_t kSeed = 11;

using testing::FixedClock;
using testing::tokens;

// The gateway's hashes of engine token ids cut at `block` tokens.
std::vector<BlockHash> requestHashes(const std::vector<uint32_t>& ids, uint32_t block) {
  std::vector<uint8_t> packed;
  tokenize::packTokenIds(ids, packed);
  return index::hashBlocks(packed, size_t{block} * tokenize::kTokenIdBytes, kSeed);
}

// One BlockStored of the first `blocks` blocks of `ids` at `block` tokens each, engine hashes base + i.
engine::KvBlockStored stored(const std::vector<uint32_t>& ids, size_t blocks, uint32_t block, uint64_t base) {
  engine::KvBlockStored event;
  for (size_t i = 0; i < blocks; ++i) event.block_hashes.push_back(EngineBlockHash{base + i});
  event.token_ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(blocks * block));
  event.block_size = block;
  return event;
}

using testing::batch;

KvEventIndexOptions options(size_t capacity, KvEventBounds bounds = {}) {
  KvEventIndexOptions o{capacity, 0.5, kSeed, 1, {}};
  o.bounds = bounds;
  return o;
}

uint32_t matchOf(const KvEventIndex& index, std::string_view model, const std::vector<BlockHash>& hashes, PodId pod) {
  std::vector<uint32_t> out(1, 99);
  index.match(model, hashes, std::vector<PodId>{pod}, out);
  return out[0];
}

// Ensures two pods whose engines use different block sizes (16 and 32 tokens) both match their own blocks, each
// with the request cut at its own size and counted in blocks of the first size, whichever published last.
TEST(KvEventBounds, PodsWithDifferentBlockSizesEachMatchTheirOwnBlocks) {
  FixedClock clock;
  KvEventIndex index(options(10000), clock);
  const auto ids = tokens(500, 8 * 32);
  index.apply(PodId{1}, "m", batch({stored(ids, 16, 16, 100)}));
  index.apply(PodId{2}, "m", batch({stored(ids, 8, 32, 200)}));
  EXPECT_EQ(index.podBlockTokens(PodId{1}), 16u);
  EXPECT_EQ(index.podBlockTokens(PodId{2}), 32u);
  std::vector<std::pair<uint32_t, uint32_t>> sizes;
  index.blockSizes(std::vector<PodId>{PodId{1}, PodId{2}, PodId{3}}, sizes);
  EXPECT_EQ(sizes, (std::vector<std::pair<uint32_t, uint32_t>>{{16, 1}, {32, 1}}));
  const auto by16 = requestHashes(ids, 16);
  const auto by32 = requestHashes(ids, 32);
  const KvPromptHashes prompts[] = {{16, by16}, {32, by32}};
  std::vector<uint32_t> matched(2);
  index.match("m", prompts, std::vector<PodId>{PodId{1}, PodId{2}}, matched);
  EXPECT_EQ(matched, (std::vector<uint32_t>{16, 16}));  // pod 2's 8 blocks of 32 are 16 of 16
  const KvPromptHashes by_32_first[] = {{32, by32}, {16, by16}};
  index.match("m", by_32_first, std::vector<PodId>{PodId{1}, PodId{2}}, matched);
  EXPECT_EQ(matched, (std::vector<uint32_t>{8, 8}));
}

// The same through PrefixServices, as a request is routed: the prompt is cut at every candidate's block size and
// each pod matches its whole prompt.
TEST(KvEventBounds, ServicesCutThePromptAtEachCandidatesBlockSize) {
  FixedClock clock;
  PrefixServices services(std::make_unique<tokenize::CharacterTokenizer>(), 64, kSeed,
                          index::PrefixIndexOptions{1000, std::chrono::minutes(20), 1}, &clock);
  services.enableKvEvents(std::make_unique<KvEventIndex>(options(10000), clock),
                          KvModeOptions{std::chrono::milliseconds(0), 10000});
  const auto ids = tokens(7, 8 * 32);
  services.kvEvents()->apply(PodId{1}, "m", batch({stored(ids, 16, 16, 100)}));
  services.kvEvents()->apply(PodId{2}, "m", batch({stored(ids, 8, 32, 200)}));
  std::vector<Candidate> candidates(2);
  candidates[0].pod_id = PodId{1};
  candidates[1].pod_id = PodId{2};
  openai::RequestView request;
  request.model = "m";
  request.remote_tokens = openai::RequestView::RemoteTokens::kOk;
  request.remote_token_ids = std::make_shared<const std::vector<uint32_t>>(ids);
  PromptBlocks prompt;
  services.hashPrompt(request, prompt, candidates);
  EXPECT_EQ(prompt.block_bytes, 16u * tokenize::kTokenIdBytes);
  ASSERT_EQ(prompt.other_cuts.size(), 1u);
  EXPECT_EQ(prompt.other_cuts[0].block_tokens, 32u);
  std::vector<PodId> scratch;
  std::vector<uint32_t> matched(2);
  services.match("m", prompt, candidates, scratch, matched);
  EXPECT_EQ(matched, (std::vector<uint32_t>{16, 16}));
  EXPECT_DOUBLE_EQ(prompt.fraction(matched[1]), 1.0);
}

// Ensures a pod flooding BlockStored (far more blocks than the index holds) loses its own oldest blocks, never
// another pod's: the other pod keeps its whole prefix, the flooder stays within the index, and the drops are
// counted for the flooder.
TEST(KvEventBounds, AFloodingPodCannotEvictAnotherPodsBlocks) {
  FixedClock clock;
  KvEventIndex index(options(1000), clock);
  const auto normal = tokens(1'000'000, 40 * 16);
  index.apply(PodId{2}, "m", batch({stored(normal, 40, 16, 1)}));
  uint64_t refused = 0;
  for (uint32_t i = 0; i < 30; ++i) {
    const auto flood = tokens(i * 10'000, 100 * 16);
    KvApplied applied = index.apply(PodId{1}, "m", batch({stored(flood, 100, 16, 100'000 + i * 1000)}));
    refused += applied.refusedFor(KvRefusal::kIndexShare) + applied.refusedFor(KvRefusal::kPodCapacity);
  }
  EXPECT_EQ(matchOf(index, "m", requestHashes(normal, 16), PodId{2}), 40u);
  EXPECT_EQ(index.podBlocks(PodId{2}), 40u);
  EXPECT_LE(index.heldBlocks(), 1000u);
  EXPECT_EQ(index.podBlocks(PodId{1}) + refused, 3000u);
  // Its newest blocks are what it keeps.
  EXPECT_EQ(matchOf(index, "m", requestHashes(tokens(29 * 10'000, 100 * 16), 16), PodId{1}), 100u);
}

// Ensures a rank holds no more blocks than its engine's reported capacity (per data-parallel rank), its oldest
// dropped first, and that without a reported capacity the configured per-pod cap bounds it.
TEST(KvEventBounds, ARankHoldsAtMostItsEnginesCapacity) {
  FixedClock clock;
  KvEventBounds bounds;
  bounds.max_pod_blocks = 30;
  KvEventIndex index(options(10000, bounds), clock);
  const KvPodLimits reported{2, 2 * 20 * 16};  // two ranks of 20 blocks of 16 tokens
  for (uint32_t i = 0; i < 5; ++i) {
    const auto ids = tokens(i * 1000, 10 * 16);
    index.apply(PodId{1}, "m", batch({stored(ids, 10, 16, i * 100)}, 1), reported);
  }
  EXPECT_EQ(index.podBlocks(PodId{1}), 20u);
  EXPECT_EQ(matchOf(index, "m", requestHashes(tokens(4000, 10 * 16), 16), PodId{1}), 10u);
  EXPECT_EQ(matchOf(index, "m", requestHashes(tokens(0, 10 * 16), 16), PodId{1}), 0u);
  KvApplied applied = index.apply(PodId{2}, "m", batch({stored(tokens(0, 50 * 16), 50, 16, 1)}));
  EXPECT_EQ(index.podBlocks(PodId{2}), 30u);
  EXPECT_EQ(applied.refusedFor(KvRefusal::kPodCapacity), 20u);
  // The head of the event is kept: a request's prefix is what matches.
  EXPECT_EQ(matchOf(index, "m", requestHashes(tokens(0, 50 * 16), 16), PodId{2}), 30u);
}

// Ensures batches of a data-parallel rank the pod does not declare are refused (no slot is made for them) and
// counted, while declared ranks are applied.
TEST(KvEventBounds, UndeclaredRanksAreRefused) {
  FixedClock clock;
  KvEventIndex index(options(10000), clock);
  const auto ids = tokens(0, 4 * 16);
  const KvPodLimits two_ranks{2, 0};
  for (uint32_t rank = 2; rank < 62; ++rank) {
    KvApplied applied = index.apply(PodId{1}, "m", batch({stored(ids, 4, 16, rank * 10)}, rank), two_ranks);
    EXPECT_EQ(applied.refusedFor(KvRefusal::kRank), 1u) << rank;
    EXPECT_EQ(applied.blocks_stored, 0u) << rank;
  }
  EXPECT_EQ(index.slots(), 0u);
  EXPECT_EQ(matchOf(index, "m", requestHashes(ids, 16), PodId{1}), 0u);
  EXPECT_EQ(index.apply(PodId{1}, "m", batch({stored(ids, 4, 16, 1)}, 1), two_ranks).blocks_stored, 4u);
  EXPECT_EQ(index.slots(), 1u);
  EXPECT_EQ(matchOf(index, "m", requestHashes(ids, 16), PodId{1}), 4u);
  // Without a declared size, only rank 0 is a rank.
  EXPECT_EQ(index.apply(PodId{2}, "m", batch({stored(ids, 4, 16, 1)}, 1)).refusedFor(KvRefusal::kRank), 1u);
}

// Ensures a rank holds blocks of at most max_pod_adapters adapters at once (an adapter whose blocks all went frees
// its place), an over-long adapter name is refused, and the pod's own model is never refused.
TEST(KvEventBounds, AdapterNamesAreBoundedPerPod) {
  FixedClock clock;
  KvEventBounds bounds;
  bounds.max_pod_adapters = 3;
  bounds.max_adapter_name_bytes = 16;
  KvEventIndex index(options(10000, bounds), clock);
  const auto ids = tokens(0, 2 * 16);
  uint64_t refused = 0;
  for (uint32_t i = 0; i < 10; ++i) {
    auto event = stored(ids, 2, 16, i * 10);
    event.lora_name = "adapter-" + std::to_string(i);
    refused += index.apply(PodId{1}, "base", batch({event})).refusedFor(KvRefusal::kAdapters);
  }
  EXPECT_EQ(refused, 7u);
  EXPECT_EQ(index.podModels(PodId{1}), 3u);
  EXPECT_EQ(matchOf(index, "adapter-2", requestHashes(ids, 16), PodId{1}), 2u);
  EXPECT_EQ(matchOf(index, "adapter-3", requestHashes(ids, 16), PodId{1}), 0u);
  auto long_name = stored(ids, 2, 16, 500);
  long_name.lora_name = std::string(17, 'x');
  EXPECT_EQ(index.apply(PodId{2}, "base", batch({long_name})).refusedFor(KvRefusal::kAdapterName), 1u);
  // The base model is stored whatever the adapters.
  EXPECT_EQ(index.apply(PodId{1}, "base", batch({stored(ids, 2, 16, 900)})).blocks_stored, 2u);
  // adapter-0's blocks leave the cache: its place goes to another adapter.
  engine::KvBlockRemoved removed;
  removed.block_hashes = {EngineBlockHash{0}, EngineBlockHash{1}};
  index.apply(PodId{1}, "base", batch({removed}));
  auto next = stored(ids, 2, 16, 700);
  next.lora_name = "adapter-9";
  EXPECT_EQ(index.apply(PodId{1}, "base", batch({next})).blocks_stored, 2u);
  EXPECT_EQ(matchOf(index, "adapter-9", requestHashes(ids, 16), PodId{1}), 2u);
}

// Ensures thousands of adapter names over many pods (past the 4,096 models a fixed registry holds) never lock out
// a model that comes after them.
TEST(KvEventBounds, ManyAdapterNamesNeverLockOutANewModel) {
  FixedClock clock;
  KvEventIndex index(options(100000), clock);
  const auto ids = tokens(0, 16);
  for (uint32_t pod = 1; pod <= 100; ++pod) {
    std::vector<engine::KvCacheEvent> events;
    for (uint32_t i = 0; i < 50; ++i) {
      auto event = stored(ids, 1, 16, pod * 1000 + i);
      event.lora_name = "p" + std::to_string(pod) + "-lora-" + std::to_string(i);
      events.push_back(event);
    }
    index.apply(PodId{pod}, "base", batch(std::move(events)));
  }
  index.apply(PodId{200}, "a-new-model", batch({stored(ids, 1, 16, 1)}));
  EXPECT_EQ(matchOf(index, "a-new-model", requestHashes(ids, 16), PodId{200}), 1u);
  EXPECT_EQ(matchOf(index, "p7-lora-49", requestHashes(ids, 16), PodId{7}), 1u);
}

// Ensures AllBlocksCleared and resets leave nothing behind: the slot keeps its identity, the index's entries and
// memory stay where they were however many clears come.
TEST(KvEventBounds, ClearsDoNotGrowState) {
  FixedClock clock;
  KvEventIndex index(options(10000), clock);
  const auto ids = tokens(0, 4 * 16);
  auto cycle = [&](uint64_t base) {
    index.apply(PodId{1}, "m", batch({stored(ids, 4, 16, base), engine::KvAllBlocksCleared{}}));
    index.apply(PodId{1}, "m", batch({stored(ids, 4, 16, base)}));
    index.resetPod(PodId{1});
  };
  cycle(0);
  const size_t memory = index.indexMemoryBytes();
  for (uint64_t i = 1; i <= 20000; ++i) cycle(i * 10);
  EXPECT_EQ(index.slots(), 1u);
  EXPECT_EQ(index.indexEntries(), 0u);
  EXPECT_EQ(index.heldBlocks(), 0u);
  EXPECT_EQ(index.indexMemoryBytes(), memory);
  index.apply(PodId{1}, "m", batch({stored(ids, 4, 16, 5)}));
  EXPECT_EQ(matchOf(index, "m", requestHashes(ids, 16), PodId{1}), 4u);
}

// Ensures an engine hash given twice in one BlockStored is held once and indexed once, so that a clear leaves no
// index entry behind (found by kv_event_decoder_fuzz: the first key outlived the slot's map).
TEST(KvEventBounds, AHashGivenTwiceInOneEventLeavesNothingBehind) {
  FixedClock clock;
  KvEventIndex index(options(10000), clock);
  auto event = stored(tokens(0, 2 * 16), 2, 16, 1);
  event.block_hashes[1] = event.block_hashes[0];
  index.apply(PodId{1}, "m", batch({event}));
  EXPECT_EQ(index.heldBlocks(), 1u);
  EXPECT_EQ(index.indexEntries(), 1u);
  index.apply(PodId{1}, "m", batch({engine::KvAllBlocksCleared{}}));
  EXPECT_EQ(index.indexEntries(), 0u);
}

}  // namespace
}  // namespace prefixgate::routing
