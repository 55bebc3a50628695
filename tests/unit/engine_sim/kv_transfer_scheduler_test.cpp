// The prefill/decode hand-off in the engine (vLLM's NixlConnector): a prefill leg hands out the blocks holding its
// prompt; a decode leg pulls only the prompt tokens its prefix cache lacks, waits for the transfer without
// computing or running, then has its pulled blocks cached and published, computes the last prompt token and
// decodes as an aggregated request would.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include <chrono>

#include "engine_sim/engine.h"
#include "engine_sim/output_text.h"
#include "engine_sim/scheduler.h"
#include "unit/token_runs.h"

namespace prefixgate::sim {
namespace {

using testing::tokens;
using testing::concat;
namespace asio = boost::asio;

constexpr uint32_t kBlock = 16;

Scheduler makeScheduler(uint64_t blocks = 100) { return Scheduler(SchedulerConfig{blocks, kBlock, 8, 8192}); }

void drain(Scheduler& scheduler) {
  for (int i = 0; i < 1000 && scheduler.hasWork(); ++i) scheduler.complete(scheduler.schedule());
}

// Ensures a prefill leg (do_remote_decode) is computed as usual and, when it finishes, hands out the ids of the
// blocks holding its whole prompt (the partial last one included); an aggregated request hands out nothing.
TEST(KvTransferScheduler, PrefillLegHandsOutItsPromptBlocks) {
  Scheduler scheduler = makeScheduler();
  ASSERT_EQ(scheduler.submit({1, tokens(0, 40), 1, KvTransfer::kSend}), SubmitStatus::kQueued);
  ASSERT_EQ(scheduler.submit({2, tokens(500, 40), 1}), SubmitStatus::kQueued);
  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].new_tokens, 40u);
  EXPECT_TRUE(plan.pulls.empty());
  StepOutcome outcome = scheduler.complete(plan);
  EXPECT_EQ(outcome.finished, (std::vector<SeqId>{1, 2}));
  ASSERT_EQ(outcome.handed_off.size(), 1u);
  EXPECT_EQ(outcome.handed_off[0].id, 1u);
  EXPECT_EQ(outcome.handed_off[0].block_ids, (std::vector<uint32_t>{0, 1, 2}));  // ceil(40 / 16), first free first
}

// Ensures a decode leg (do_remote_prefill) pulls only the tokens its prefix cache lacks: it takes its cached blocks
// and allocates the rest, computes nothing and is not running (it counts as waiting) until the pull ends.
TEST(KvTransferScheduler, DecodeLegPullsOnlyUncachedTokens) {
  Scheduler scheduler = makeScheduler();
  std::vector<uint32_t> shared = tokens(0, 32);
  scheduler.submit({1, concat(shared, tokens(100, 8)), 1});
  drain(scheduler);
  uint64_t hits_before = scheduler.counters().prefix_cache_hits;
  std::vector<uint32_t> prompt = concat(shared, tokens(200, 20));  // 52 tokens, 32 cached
  ASSERT_EQ(scheduler.submit({2, prompt, 3, KvTransfer::kReceive}), SubmitStatus::kQueued);
  uint64_t used_before = scheduler.usedBlocks();
  StepPlan plan = scheduler.schedule();
  EXPECT_TRUE(plan.entries.empty());
  EXPECT_TRUE(plan.started.empty());
  ASSERT_EQ(plan.pulls.size(), 1u);
  EXPECT_EQ(plan.pulls[0].id, 2u);
  EXPECT_EQ(plan.pulls[0].tokens, 20u);
  EXPECT_EQ(scheduler.usedBlocks() - used_before, 4u);  // ceil(52 / 16) held while the KV arrives
  EXPECT_EQ(scheduler.numRunning(), 0u);
  EXPECT_EQ(scheduler.numWaiting(), 1u);
  EXPECT_FALSE(scheduler.hasWork());  // nothing to schedule until the pull ends
  EXPECT_EQ(scheduler.counters().prefix_cache_hits - hits_before, 32u);  // the local hit only
  EXPECT_EQ(scheduler.cachedPrefixTokens(prompt), 32u);  // pulled blocks are not cached before they arrive
}

// Ensures the pulled blocks become cached (found by later prompts) and are published as BlockStored once the pull
// ends, and the decode leg then computes one token (its last prompt token), reports prompt - 1 tokens cached (as
// vLLM counts external ones) and samples the tokens an aggregated request of that prompt samples.
TEST(KvTransferScheduler, PulledBlocksBecomeCachedAndPublishedThenDecode) {
  Scheduler scheduler = makeScheduler();
  scheduler.recordEvents();
  std::vector<uint32_t> prompt = tokens(0, 52);
  scheduler.submit({7, prompt, 2, KvTransfer::kReceive});
  StepPlan pull = scheduler.schedule();
  ASSERT_EQ(pull.pulls.size(), 1u);
  EXPECT_EQ(pull.pulls[0].tokens, 52u);
  scheduler.complete(pull);
  EXPECT_TRUE(scheduler.takeEvents().empty());
  scheduler.finishPull(7);
  std::vector<KvEvent> events = scheduler.takeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(events[0].block_hashes.size(), 3u);  // the full blocks of the first 51 tokens
  EXPECT_EQ(events[0].token_ids, tokens(0, 48));
  EXPECT_EQ(scheduler.cachedPrefixTokens(concat(prompt, {9})), 48u);
  EXPECT_TRUE(scheduler.hasWork());

  StepPlan step = scheduler.schedule();
  ASSERT_EQ(step.entries.size(), 1u);
  EXPECT_EQ(step.entries[0].new_tokens, 1u);
  EXPECT_EQ(step.entries[0].computed_before, 51u);
  EXPECT_EQ(step.started, std::vector<SeqId>{7});
  EXPECT_EQ(scheduler.status(7)->cached_tokens, 51);
  StepOutcome outcome = scheduler.complete(step);
  EXPECT_EQ(outcome.sampled, std::vector<SeqId>{7});
  EXPECT_EQ(scheduler.status(7)->generated, 1u);
  outcome = scheduler.complete(scheduler.schedule());
  EXPECT_EQ(outcome.finished, std::vector<SeqId>{7});
  EXPECT_TRUE(outcome.handed_off.empty());
}

// Ensures a decode leg that leaves during its pull frees its blocks, and the pull's late end is ignored.
TEST(KvTransferScheduler, AbortDuringPullFreesBlocks) {
  Scheduler scheduler = makeScheduler();
  scheduler.submit({3, tokens(0, 40), 2, KvTransfer::kReceive});
  scheduler.schedule();
  EXPECT_EQ(scheduler.usedBlocks(), 3u);
  scheduler.abort(3);
  EXPECT_EQ(scheduler.usedBlocks(), 0u);
  EXPECT_EQ(scheduler.numWaiting(), 0u);
  scheduler.finishPull(3);
  EXPECT_FALSE(scheduler.hasWork());
  EXPECT_EQ(scheduler.cachedPrefixTokens(tokens(0, 40)), 0u);
}

SimConfig engineConfig(double time_scale) {
  SimConfig config;
  config.time_scale = time_scale;
  return config;
}

void runUntilFinished(asio::io_context& io, Engine& engine, const Engine::Sequence& sequence) {
  asio::co_spawn(io, engine.run(), asio::detached);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!sequence.finished() && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(10));
  engine.stop();
  io.poll();
}

// Ensures a decode leg's pull takes kv-transfer-ms-per-1k-tokens (x --time-scale) of waiting, in real time, and
// no step time: with free steps, its first token comes after the transfer, and the engine computed only the last
// prompt token.
TEST(KvTransferEngine, DecodeLegWaitsForTheTransferWithoutComputingIt) {
  SimConfig config = engineConfig(0.5);
  config.kv_transfer_ms_per_1k_tokens = 2000;  // 100 tokens: 200 simulated ms, 100 real ms
  config.decode_ms_per_token = config.decode_ms_per_running_seq = config.step_overhead_ms = 0;
  config.attention_ms_per_1k_context = config.prefill_attention_ms_per_m_pairs = 0;
  config.prefill_tokens_per_s = 1e12;
  asio::io_context io;
  Engine engine(config);
  auto started_at = std::chrono::steady_clock::now();
  auto decode = engine.start(io.get_executor(), tokens(0, 100), 2, KvTransfer::kReceive);
  runUntilFinished(io, engine, *decode.sequence);
  double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_at).count();
  ASSERT_TRUE(decode.sequence->finished());
  EXPECT_EQ(decode.sequence->kvPulledTokens(), 100u);
  EXPECT_DOUBLE_EQ(decode.sequence->kvTransferMs(), 200.0);
  EXPECT_GE(waited_ms, 95.0);
  EXPECT_EQ(decode.sequence->cachedTokens(), 99u);
  // The transfer is not prefill compute, nor is its last prompt token (a decode row).
  EXPECT_EQ(engine.snapshot().activity.prefill_tokens, 0u);
  EXPECT_EQ(engine.snapshot().activity.steps, 2u);  // nor a step: the last prompt token, then a decode
}

// Ensures a request without kv_transfer_params computes its whole prompt (aggregated), whatever the pod's role.
TEST(KvTransferEngine, RequestWithoutParamsComputesAggregated) {
  SimConfig config = engineConfig(0);
  config.role = "decode";
  asio::io_context io;
  Engine engine(config);
  auto aggregated = engine.start(io.get_executor(), tokens(0, 100), 2);
  runUntilFinished(io, engine, *aggregated.sequence);
  EXPECT_EQ(aggregated.sequence->kvPulledTokens(), 0u);
  EXPECT_EQ(aggregated.sequence->cachedTokens(), 0u);
  EXPECT_EQ(engine.snapshot().activity.prefill_tokens, 100u);
}

// Ensures the prefill leg's sequence carries its handed-out block ids once finished.
TEST(KvTransferEngine, PrefillLegKeepsItsBlockIds) {
  asio::io_context io;
  Engine engine(engineConfig(0));
  auto prefill = engine.start(io.get_executor(), tokens(0, 33), 1, KvTransfer::kSend);
  runUntilFinished(io, engine, *prefill.sequence);
  EXPECT_EQ(prefill.sequence->kvBlockIds().size(), 3u);
  EXPECT_EQ(prefill.sequence->kvPulledTokens(), 0u);
}

}  // namespace
}  // namespace prefixgate::sim
