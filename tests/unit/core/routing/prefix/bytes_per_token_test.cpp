// The bytes of a prompt's encoding per engine token, learned per model from engines' usage, and where the prefix
// services use it: the engine tokens of a locally tokenized prompt, and a pod's KV capacity in blocks.
#include "routing/prefix/bytes_per_token.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "routing/prefix/prefix_services.h"
#include "unit/core/pod_specs.h"
#include "unit/index/manual_clock.h"

namespace prefixgate::routing {
namespace {

// Ensures a model's ratio is the default until a response reports usage, then follows the decayed sums of bytes
// and tokens (long prompts weigh more than short ones), per model.
TEST(BytesPerToken, LearnsPerModel) {
  BytesPerToken ratios;
  EXPECT_DOUBLE_EQ(ratios.ratio("m"), tokenize::kDefaultBytesPerToken);
  ratios.add("m", 2700, 1000);
  EXPECT_DOUBLE_EQ(ratios.ratio("m"), 2.7);
  EXPECT_DOUBLE_EQ(ratios.ratio("other"), tokenize::kDefaultBytesPerToken);
  ratios.add("m", 30, 30);  // a short prompt barely moves it
  EXPECT_NEAR(ratios.ratio("m"), (2700 * BytesPerToken::kDecay + 30) / (1000 * BytesPerToken::kDecay + 30), 1e-9);
  EXPECT_GT(ratios.ratio("m"), 2.6);
  EXPECT_EQ(ratios.samples("m"), 2u);
  for (int i = 0; i < 400; ++i) ratios.add("m", 4000, 1000);  // the traffic changed: the ratio follows
  EXPECT_NEAR(ratios.ratio("m"), 4.0, 0.01);
}

// Ensures nonsense samples (no tokens, no bytes, or a ratio no tokenizer gives) are ignored.
TEST(BytesPerToken, IgnoresImplausibleSamples) {
  BytesPerToken ratios;
  ratios.add("m", 0, 10);
  ratios.add("m", 10, 0);
  ratios.add("m", 10'000, 1);  // 10,000 bytes per token
  ratios.add("m", 1, 100);     // 0.01 bytes per token
  EXPECT_EQ(ratios.samples("m"), 0u);
  EXPECT_DOUBLE_EQ(ratios.ratio("m"), tokenize::kDefaultBytesPerToken);
  EXPECT_EQ(ratios.engineTokens("m", 0), 0u);
  EXPECT_EQ(ratios.engineTokens("m", 1), 1u);  // a non-empty prompt is at least one token
  EXPECT_EQ(ratios.engineTokens("m", 400), 100u);
}

// Ensures responses on every thread add to a model's ratio while decisions read it, without a data race (TSan
// runs this), and no sample is lost.
TEST(BytesPerToken, ConcurrentAddsAndReads) {
  BytesPerToken ratios;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&ratios, t] {
      const std::string model = t % 2 ? "a" : "b";
      for (int i = 0; i < 500; ++i) {
        ratios.add(model, 300, 100);
        EXPECT_NEAR(ratios.ratio(model), 3.0, 1e-9);
        EXPECT_GE(ratios.engineTokens("a", 3000), 750u);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(ratios.samples("a") + ratios.samples("b"), 2000u);
}

class CapacityTest : public ::testing::Test {
 protected:
  index::testing::ManualClock clock_;  // how long a slot's request has been served
  PrefixServices services_{std::make_unique<tokenize::CharacterTokenizer>(), 128, 0,
                           index::PrefixIndexOptions{100000, std::chrono::minutes(20), 4}, &clock_};
  // A llama.cpp pod that reported 2 slots, and an 8-block prompt of model "m", hashed, with capacity-aware mode on.
  std::shared_ptr<discovery::PodState> slotPod(uint32_t id) {
    discovery::PodSpec spec = testing::podSpec("a", id);
    spec.engine = engine::EngineKind::kLlamaCpp;
    auto pod = std::make_shared<discovery::PodState>(PodId{id}, spec);
    pod->engine().publishSlots(2, 4096);
    return pod;
  }
  // `pod`'s expected slot wait for `blocks` as the only candidate of a request that may wait (`may_wait`), 0 when
  // its match counts on no busy slot; its match into matched[0].
  double slotWait(discovery::PodState& pod, const PromptBlocks& blocks, std::vector<uint32_t>& matched,
                  bool may_wait = true) {
    std::vector<Candidate> candidates(1);
    candidates[0].pod = &pod;
    candidates[0].pod_id = pod.id();
    std::vector<PodId> scratch;
    std::vector<double> waits;
    services_.match("m", blocks.hashes, candidates, scratch, matched, may_wait ? &waits : nullptr);
    return waits.empty() ? 0.0 : waits[0];
  }
  PromptBlocks eightBlocks() {
    services_.setCapacityAware(true);  // the default (routing.prefix_cache.capacity_aware)
    openai::RequestView request;
    request.model = "m";
    request.prompt_text = std::string(1024, 'q');
    PromptBlocks blocks;
    services_.hashPrompt(request, blocks);
    return blocks;
  }
};

// Ensures a locally tokenized prompt's engine tokens follow the learned ratio, while token ids count exactly.
TEST_F(CapacityTest, EngineTokensOfAPrompt) {
  openai::RequestView text;
  text.model = "m";
  text.prompt_text = std::string(2700, 'x');
  PromptBlocks blocks;
  services_.hashPrompt(text, blocks);
  EXPECT_EQ(blocks.tokens, 2700u);  // the character tokenizer's
  EXPECT_EQ(blocks.engine_tokens, 675u);
  services_.bytesPerToken().add("m", 2700, 1000);
  services_.hashPrompt(text, blocks);
  EXPECT_EQ(blocks.engine_tokens, 1000u);
  EXPECT_NEAR(blocks.blockTokens(), 128 / 2.7, 1e-9);
  openai::RequestView ids;
  ids.model = "m";
  ids.has_token_ids = true;
  ids.prompt_token_ids = std::vector<uint32_t>(77, 5);
  services_.hashPrompt(ids, blocks);
  EXPECT_EQ(blocks.engine_tokens, 77u);
}

// Ensures a pod's KV capacity in blocks converts its tokens at the model's learned bytes per token: the same
// 10,000-token cache holds 312 blocks of 128 bytes at the default 4, 210 at 2.7.
TEST_F(CapacityTest, CapacityBlocksAtTheLearnedRatio) {
  discovery::PodSpec spec = testing::podSpec("a", 1);
  spec.kv_capacity_tokens = 10'000;
  discovery::PodState pod(PodId{1}, spec);
  EXPECT_EQ(services_.capacityBlocks(pod, "m"), 312u);
  services_.bytesPerToken().add("m", 27000, 10000);
  EXPECT_EQ(services_.capacityBlocks(pod, "m"), 210u);
  EXPECT_EQ(services_.capacityBlocks(pod, "another"), 312u);
  discovery::PodState unknown(PodId{2}, testing::podSpec("b", 2));
  EXPECT_EQ(services_.capacityBlocks(unknown, "m"), 0u);  // nothing said: unbounded
}

// Ensures a llama.cpp pod's slots are modelled once /props gave them (unless a pods-file kv_capacity_tokens says
// otherwise; never for another engine), and bound its predictions only once it is known to keep nothing beyond
// them (votes: a miss where routing history promised a hit), not with a host prompt cache (votes: hits beyond the
// slots).
TEST_F(CapacityTest, SlotsBoundALlamaCppPodOnlyWhenItKeepsNothingElse) {
  using SlotCache = engine::EngineLoad::SlotCache;
  discovery::PodSpec spec = testing::podSpec("a", 1);
  spec.engine = engine::EngineKind::kLlamaCpp;
  discovery::PodState pod(PodId{1}, spec);
  EXPECT_EQ(PrefixServices::modelledSlots(pod), 0u);  // /props not read yet
  pod.engine().publishSlots(2, 4096);
  EXPECT_EQ(PrefixServices::modelledSlots(pod), 2u);
  EXPECT_EQ(PrefixServices::cachedSlots(pod), 0u);     // unknown: llama-server's default keeps a host cache
  EXPECT_EQ(services_.capacityBlocks(pod, "m"), 0u);   // its slots x context is no bound for blocks
  EXPECT_EQ(pod.engine().voteSlotCache(false), SlotCache::kSlotsOnly);  // the first clean evidence decides
  EXPECT_EQ(pod.engine().voteSlotCache(false), std::nullopt);
  EXPECT_EQ(PrefixServices::cachedSlots(pod), 2u);
  // Hits beyond the slots keep coming: the early decision is revised, once.
  EXPECT_EQ(pod.engine().voteSlotCache(true), std::nullopt);
  EXPECT_EQ(pod.engine().voteSlotCache(true), std::nullopt);
  EXPECT_EQ(pod.engine().voteSlotCache(true), SlotCache::kHostCache);
  EXPECT_EQ(pod.engine().voteSlotCache(false), std::nullopt);
  EXPECT_EQ(PrefixServices::cachedSlots(pod), 0u);

  discovery::PodState cached(PodId{2}, spec);
  cached.engine().publishSlots(2, 4096);
  EXPECT_EQ(cached.engine().voteSlotCache(true), SlotCache::kHostCache);
  EXPECT_TRUE(cached.engine().hostCacheSeen());
  EXPECT_EQ(PrefixServices::modelledSlots(cached), 0u);  // nothing to model: its hits follow routing history

  spec.kv_capacity_tokens = 100'000;
  discovery::PodState configured(PodId{3}, spec);
  configured.engine().publishSlots(2, 4096);
  EXPECT_EQ(PrefixServices::modelledSlots(configured), 0u);
  EXPECT_EQ(services_.capacityBlocks(configured, "m"), 3125u);
  spec.kv_capacity_tokens = 0;
  spec.engine = engine::EngineKind::kVllm;
  discovery::PodState vllm(PodId{4}, spec);
  vllm.engine().publishSlots(2, 4096);  // never for vLLM, but even so: not a slot engine
  EXPECT_EQ(PrefixServices::modelledSlots(vllm), 0u);
  EXPECT_EQ(services_.capacityBlocks(vllm, "m"), 256u);
}

// Ensures a llama.cpp pod's match leaves out a prefix only a slot busy with another request holds (until that
// request ended), whether or not it is known yet to keep nothing beyond its slots.
TEST_F(CapacityTest, APrefixInABusySlotIsNotMatched) {
  auto pod = slotPod(1);
  const PromptBlocks blocks = eightBlocks();
  ASSERT_EQ(blocks.hashes.size(), 8u);
  std::unique_ptr<PendingRequest> busy;
  ASSERT_TRUE(services_.recordRouted("m", blocks.hashes, *pod, true, &busy));
  ASSERT_TRUE(busy);
  std::vector<Candidate> candidates(1);
  candidates[0].pod = pod.get();
  candidates[0].pod_id = pod->id();
  std::vector<PodId> scratch;
  std::vector<uint32_t> matched(1);
  services_.match("m", blocks.hashes, candidates, scratch, matched);
  EXPECT_EQ(matched[0], 0u);  // not known yet what it keeps beyond its slots, but that one is busy
  pod->engine().voteSlotCache(false);
  ASSERT_EQ(PrefixServices::cachedSlots(*pod), 2u);
  services_.match("m", blocks.hashes, candidates, scratch, matched);
  EXPECT_EQ(matched[0], 0u);  // its only holder is busy
  busy.reset();               // the request ended
  services_.match("m", blocks.hashes, candidates, scratch, matched);
  EXPECT_EQ(matched[0], 8u);
}

// A request's turn in a busy slot, noting whether it came.
struct NotedTurn final : index::PodBlockLedger::SlotTurn {
  bool came = false;
  void ready() override { came = true; }
};

// Ensures slot waits (routing.prefix_cache.slot_wait_ms): a prefix only a busy slot holds is matched when the
// request may wait for that slot (slot_wait_s gives the expected wait) and the slot is expected to free within the
// limit; a request recorded with a turn is queued for that slot and told when it frees. The wait is what the
// request served there has left (here its time is unknown: the pod's mean service time, less how long it has been
// served, at least a quarter of it), then the times of those queued before. Also for a pod with a host prompt
// cache (its slots tracked for this only); never beyond the limit, and never for a caller that cannot wait.
TEST_F(CapacityTest, APrefixInABusySlotIsWaitedFor) {
  services_.setSlotWait(std::chrono::milliseconds(2000));
  const PromptBlocks blocks = eightBlocks();
  ASSERT_EQ(blocks.hashes.size(), 8u);
  for (const bool host_cache : {false, true}) {
    auto pod = slotPod(host_cache ? 2 : 1);
    if (host_cache) pod->engine().voteSlotCache(true);
    EXPECT_EQ(services_.trackedSlots(*pod), 2u);
    std::unique_ptr<PendingRequest> busy;
    ASSERT_TRUE(services_.recordRouted("m", blocks.hashes, *pod, true, &busy));
    std::vector<uint32_t> matched(1);
    auto wait0 = [&] { return slotWait(*pod, blocks, matched); };
    EXPECT_DOUBLE_EQ(wait0(), PrefixServices::kMinSlotWaitS);  // no service time measured yet: still a wait
    EXPECT_EQ(matched[0], 8u) << host_cache;
    slotWait(*pod, blocks, matched, false);  // a caller that cannot wait
    EXPECT_EQ(matched[0], host_cache ? 8u : 0u);  // (a host-cache pod's match follows routing history, as before)
    // A request recorded with a turn is queued for the busy slot and told when it frees.
    auto turn = std::make_shared<NotedTurn>();
    std::unique_ptr<PendingRequest> second;
    bool queued = false;
    ASSERT_TRUE(services_.recordRouted("m", blocks.hashes, *pod, true, &second, turn, &queued));
    EXPECT_TRUE(queued);
    EXPECT_FALSE(turn->came);
    busy.reset();
    EXPECT_TRUE(turn->came);
    // Its pod serves a response in 3 s: the one now served is expected to free in 3 s, then less as it runs, and at
    // least in a quarter of that (one that runs long has some way to go still).
    pod->signals().service().add(3.0, 0);
    EXPECT_DOUBLE_EQ(wait0(), 0.0);  // 3 s: beyond the 2 s limit, neither waited for nor matched
    EXPECT_EQ(matched[0], host_cache ? 8u : 0u);
    clock_.advance(std::chrono::milliseconds(1500));
    EXPECT_DOUBLE_EQ(wait0(), 1.5);
    EXPECT_EQ(matched[0], 8u);
    clock_.advance(std::chrono::seconds(3));
    EXPECT_DOUBLE_EQ(wait0(), 0.75);
    // One more queued (its time unknown: 3 s): 3.75 s, beyond the limit.
    auto third_turn = std::make_shared<NotedTurn>();
    std::unique_ptr<PendingRequest> third;
    ASSERT_TRUE(services_.recordRouted("m", blocks.hashes, *pod, true, &third, third_turn, &queued));
    EXPECT_TRUE(queued);
    EXPECT_DOUBLE_EQ(wait0(), 0.0);
    EXPECT_EQ(matched[0], host_cache ? 8u : 0u);
  }
  // Off: a host-cache pod's slots are not tracked at all.
  services_.setSlotWait(std::chrono::milliseconds(0));
  auto off = slotPod(3);
  off->engine().voteSlotCache(true);
  EXPECT_EQ(services_.trackedSlots(*off), 0u);
}

// Ensures a slot's wait follows the times its requests were expected to take when they were recorded: the served
// one's less how long it has run, then each queued one's own (the time it takes once it has the slot), the next
// one's counted from its turn; and that a request's expected time is its pod's learned base and prefill rate for
// its uncached tokens plus its mean decode (the model's rates pooled over its pods for a pod with too few streams
// of its own), unknown (-1) until both were measured.
TEST_F(CapacityTest, ASlotWaitFollowsItsRequestsExpectedTimes) {
  services_.setSlotWait(std::chrono::milliseconds(2000));
  const PromptBlocks blocks = eightBlocks();
  auto pod = slotPod(4);
  pod->signals().service().add(5.0, 0);  // the pod's mean: beyond the limit, used for no request here
  std::vector<uint32_t> matched(1);
  auto wait0 = [&] { return slotWait(*pod, blocks, matched); };
  std::unique_ptr<PendingRequest> served, queued_hold;
  ASSERT_TRUE(services_.recordRouted("m", blocks.hashes, *pod, true, &served, nullptr, nullptr, 1.0));
  EXPECT_DOUBLE_EQ(wait0(), 1.0);
  clock_.advance(std::chrono::milliseconds(600));
  EXPECT_NEAR(wait0(), 0.4, 1e-9);
  auto turn = std::make_shared<NotedTurn>();
  bool queued = false;
  ASSERT_TRUE(services_.recordRouted("m", blocks.hashes, *pod, true, &queued_hold, turn, &queued, 0.5));
  ASSERT_TRUE(queued);
  EXPECT_NEAR(wait0(), 0.9, 1e-9);  // 0.4 left, then 0.5
  served.reset();  // its turn: served from now, for 0.5 s
  ASSERT_TRUE(turn->came);
  EXPECT_NEAR(wait0(), 0.5, 1e-9);
  clock_.advance(std::chrono::milliseconds(200));
  EXPECT_NEAR(wait0(), 0.3, 1e-9);

  EXPECT_EQ(services_.expectedServiceSeconds(*pod, "m", 100), -1);  // nothing learned yet
  pod->signals().decode().add(0.25, 0);
  EXPECT_EQ(services_.expectedServiceSeconds(*pod, "m", 100), -1);  // no prefill rate learned yet
  for (int i = 0; i < 20; ++i) pod->signals().rates().add(100.0 * (i % 5), 0, 0, 0.02 + 0.001 * (i % 5));
  const ServiceRates::Rates rates = pod->signals().rates().read();
  ASSERT_GE(rates.samples, PrefixServices::kOwnRatesSamples);
  EXPECT_DOUBLE_EQ(services_.expectedServiceSeconds(*pod, "m", 300),
                   rates.base_s + 300 * rates.prefill_s_per_token + 0.25);
  EXPECT_DOUBLE_EQ(services_.expectedServiceSeconds(*pod, "m", -5), rates.base_s + 0.25);
  // A pod with fewer streams of its own takes the model's rates pooled over its pods, once they have as many.
  auto fresh = slotPod(5);
  fresh->signals().decode().add(0.5, 0);
  for (int i = 0; i < 3; ++i) fresh->signals().rates().add(1000, 0, 0, 9.0);  // its own: too few to count
  for (uint64_t i = 0; i + 1 < ModelRates::kMinSamples; ++i)
    services_.modelRates().add("m", 500.0 + 1000.0 * i, 0, 0, 0.1 + 0.4 * i);
  EXPECT_EQ(services_.expectedServiceSeconds(*fresh, "m", 1000), -1);  // the pool is one stream short
  services_.modelRates().add("m", 3000, 0, 0, 1.3);
  const ServiceRates::Rates pooled = services_.modelRates().read("m");
  EXPECT_EQ(pooled.samples, ModelRates::kMinSamples);
  EXPECT_GT(pooled.prefill_s_per_token, 1e-4);  // ~0.4 ms a token, not kDefaults' 0.04
  EXPECT_DOUBLE_EQ(services_.expectedServiceSeconds(*fresh, "m", 1000),
                   pooled.base_s + 1000 * pooled.prefill_s_per_token + 0.5);
  EXPECT_EQ(services_.modelRates().read("other").samples, 0u);  // per model
}

}  // namespace
}  // namespace prefixgate::routing
