// The real-time engine loop driven by an io_context with --time-scale 0: every step takes no time, so these run
// instantly (no sockets, no sleeps) and check the step loop, wake-ups, cancellation and cached output blocks.
#include "engine_sim/engine.h"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "engine_sim/output_text.h"
#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {
namespace asio = boost::asio;

SimConfig instantConfig(uint32_t max_num_seqs) {
  SimConfig config;
  config.time_scale = 0;
  config.max_num_seqs = max_num_seqs;
  return config;
}

// Reads a sequence to its end as a session does, logging its first token and its end.
asio::awaitable<void> consume(Engine& engine, Engine::Sequence& sequence, std::vector<std::string>& events,
                              std::string name) {
  uint32_t seen = 0;
  while (!sequence.finished()) {
    if (!co_await engine.waitProgress(sequence, seen)) {
      events.push_back(name + " cancelled");
      co_return;
    }
    if (seen == 0 && sequence.generatedTokens() > 0) events.push_back(name + " first");
    seen = sequence.generatedTokens();
  }
  events.push_back(name + " done");
}

// Runs the io_context until the engine has no more work, then stops the engine loop.
void runUntilIdle(asio::io_context& io, Engine& engine) {
  asio::co_spawn(io, engine.run(), asio::detached);
  for (int i = 0; i < 100000; ++i) {
    if (io.poll_one() == 0 && !engine.scheduler().hasWork()) break;
  }
  engine.stop();
  io.poll();
}

// Ensures a request beyond max_num_seqs waits, runs after the running one finishes, and then hits its cache.
TEST(Engine, WaitingSequenceRunsAfterOtherFinishes) {
  asio::io_context io;
  Engine engine(instantConfig(1));
  std::vector<uint32_t> prompt = tokenize(std::string(200, 'p'));  // 50 tokens, 3 full blocks
  auto a = engine.start(io.get_executor(), prompt, 3);
  auto b = engine.start(io.get_executor(), prompt, 3);
  ASSERT_TRUE(a.sequence && b.sequence);
  std::vector<std::string> events;
  asio::co_spawn(io, consume(engine, *b.sequence, events, "b"), asio::detached);
  asio::co_spawn(io, consume(engine, *a.sequence, events, "a"), asio::detached);
  runUntilIdle(io, engine);
  EXPECT_EQ(events, (std::vector<std::string>{"a first", "a done", "b first", "b done"}));
  EXPECT_EQ(a.sequence->cachedTokens(), 0u);
  EXPECT_EQ(b.sequence->cachedTokens(), 48u);
  EXPECT_EQ(b.sequence->generatedTokens(), 3u);
  MetricsSnapshot snapshot = engine.snapshot();
  EXPECT_EQ(snapshot.num_requests_running, 0u);
  EXPECT_EQ(snapshot.counters.generation_tokens, 6u);
  EXPECT_EQ(engine.histograms().e2e_request_latency.count(), 2u);
  EXPECT_EQ(engine.histograms().time_to_first_token.count(), 2u);
  EXPECT_EQ(engine.histograms().inter_token_latency.count(), 4u);
  EXPECT_EQ(engine.histograms().request_queue_time.count(), 2u);
}

// Ensures a one-token request reports its cached prompt tokens (it finishes, and leaves the scheduler, in the step
// that samples its only token).
TEST(Engine, OneTokenRequestReportsItsCacheHit) {
  asio::io_context io;
  Engine engine(instantConfig(4));
  std::vector<uint32_t> prompt = tokenize(std::string(200, 'p'));  // 50 tokens, 3 full blocks
  std::vector<std::string> events;
  asio::co_spawn(io, engine.run(), asio::detached);
  auto first = engine.start(io.get_executor(), prompt, 1);
  asio::co_spawn(io, consume(engine, *first.sequence, events, "first"), asio::detached);
  for (int i = 0; i < 1000 && !first.sequence->finished(); ++i) io.poll_one();
  auto hit = engine.start(io.get_executor(), prompt, 1);
  asio::co_spawn(io, consume(engine, *hit.sequence, events, "hit"), asio::detached);
  for (int i = 0; i < 1000 && !hit.sequence->finished(); ++i) io.poll_one();
  ASSERT_TRUE(hit.sequence->finished());
  EXPECT_EQ(first.sequence->cachedTokens(), 0u);
  EXPECT_EQ(hit.sequence->cachedTokens(), 48u);
  EXPECT_EQ(hit.sequence->generatedTokens(), 1u);
  engine.stop();
  io.poll();
}

// Ensures a second turn that carries the first turn's reply finds the reply's blocks in the cache.
TEST(Engine, NextTurnHitsGeneratedBlocks) {
  asio::io_context io;
  Engine engine(instantConfig(4));
  std::vector<uint32_t> prompt = tokenize(std::string(80, 'q'));  // 20 tokens
  auto first = engine.start(io.get_executor(), prompt, 40);
  std::vector<std::string> events;
  asio::co_spawn(io, consume(engine, *first.sequence, events, "first"), asio::detached);
  runUntilIdle(io, engine);
  ASSERT_EQ(events.back(), "first done");
  std::vector<uint32_t> next = prompt;
  appendTokens(OutputText::forPrompt(prompt).text(40), next);  // the reply, tokenized again
  appendTokens("next question", next);
  // 20 + 40 tokens, 59 computed: three full blocks, two of them (partly) output.
  EXPECT_EQ(engine.cachedPrefixTokens(next), 48u);
  EXPECT_EQ(engine.cachedPrefixTokens(prompt), 16u);
}

// Ensures a cancelled waiting sequence stops waiting and, once destroyed, leaves the queue.
TEST(Engine, CancelledWaitingSequenceLeavesQueue) {
  asio::io_context io;
  Engine engine(instantConfig(1));
  auto a = engine.start(io.get_executor(), tokenize("first"), 1000);
  auto b = engine.start(io.get_executor(), tokenize("second"), 2);
  std::vector<std::string> events;
  asio::cancellation_signal cancel;
  asio::co_spawn(io, consume(engine, *b.sequence, events, "b"),
                 asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  asio::co_spawn(io, engine.run(), asio::detached);
  for (int i = 0; i < 20; ++i) io.poll_one();
  EXPECT_TRUE(events.empty());  // b waits for a slot while a generates
  cancel.emit(asio::cancellation_type::terminal);
  for (int i = 0; i < 20; ++i) io.poll_one();
  EXPECT_EQ(events, (std::vector<std::string>{"b cancelled"}));
  b.sequence.reset();
  EXPECT_EQ(engine.snapshot().num_requests_waiting, 0u);
  EXPECT_EQ(engine.snapshot().num_requests_running, 1u);
  a.sequence.reset();  // a's client leaves too: the engine has nothing left
  EXPECT_FALSE(engine.scheduler().hasWork());
  engine.stop();
  io.poll();
}

// Ensures a prefill-only sequence (embeddings) finishes without producing tokens.
TEST(Engine, PrefillOnlySequenceFinishes) {
  asio::io_context io;
  Engine engine(instantConfig(4));
  auto seq = engine.start(io.get_executor(), tokenize(std::string(100, 'e')), 0);
  std::vector<std::string> events;
  asio::co_spawn(io, consume(engine, *seq.sequence, events, "e"), asio::detached);
  runUntilIdle(io, engine);
  EXPECT_EQ(events, std::vector<std::string>{"e done"});
  EXPECT_EQ(seq.sequence->generatedTokens(), 0u);
}

// Ensures a request that can never fit the KV cache is refused with a message.
TEST(Engine, RefusesRequestLargerThanCache) {
  asio::io_context io;
  SimConfig config = instantConfig(4);
  config.kv_capacity_tokens = 64;  // 4 blocks
  Engine engine(config);
  auto started = engine.start(io.get_executor(), tokenize(std::string(400, 'x')), 10);
  EXPECT_FALSE(started.sequence);
  EXPECT_NE(started.error.find("KV cache blocks"), std::string::npos);
}

// Ensures a request's timings and the engine's activity are in simulated time (even at --time-scale 0): its
// prompt time is its prefill step, its generation time the decode steps after, and the activity window restarts.
TEST(Engine, ReportsSimulatedTimingsAndActivity) {
  asio::io_context io;
  Engine engine(instantConfig(4));
  auto seq = engine.start(io.get_executor(), tokenize(std::string(200, 'p')), 3);  // 50 tokens
  std::vector<std::string> events;
  asio::co_spawn(io, consume(engine, *seq.sequence, events, "s"), asio::detached);
  runUntilIdle(io, engine);
  MetricsSnapshot snapshot = engine.snapshot();
  const EngineActivity& activity = snapshot.activity;
  EXPECT_EQ(activity.steps, 3u);  // one prefill step (first token), two decode steps
  EXPECT_EQ(activity.busy_slot_steps, 3u);
  EXPECT_EQ(activity.prefill_tokens, 50u);
  EXPECT_EQ(activity.generated_tokens, 3u);
  EXPECT_EQ(activity.predicted_tokens, 3u);
  EXPECT_EQ(activity.predicted_steps, 2u);
  EXPECT_EQ(activity.max_sequence_tokens, 53u);
  EXPECT_GT(seq.sequence->promptMs(), 0);
  EXPECT_DOUBLE_EQ(seq.sequence->promptMs(), activity.prefill_ms);
  EXPECT_DOUBLE_EQ(seq.sequence->predictedMs(), activity.busy_ms - activity.prefill_ms);
  EXPECT_DOUBLE_EQ(activity.predicted_ms, seq.sequence->predictedMs());
  EXPECT_EQ(snapshot.window.steps, 3u);
  engine.startActivityWindow();
  EXPECT_EQ(engine.snapshot().window.steps, 0u);
  EXPECT_EQ(engine.snapshot().activity.steps, 3u);
}

SimConfig slotsConfig(uint32_t slots, uint64_t host_cache_tokens, double restore_ms_per_1k = 0.5) {
  SimConfig config = instantConfig(slots);
  config.kv_cache_model = "slots";
  config.kv_capacity_tokens = 1024 * slots;
  config.host_cache_tokens = host_cache_tokens;
  config.host_cache_restore_ms_per_1k_tokens = restore_ms_per_1k;
  return config;
}

// Runs prompts one after another to their end on a slots engine; returns each one's (cached tokens, prompt ms).
std::vector<std::pair<uint32_t, double>> runInTurn(const SimConfig& config,
                                                   const std::vector<std::vector<uint32_t>>& prompts) {
  asio::io_context io;
  Engine engine(config);
  asio::co_spawn(io, engine.run(), asio::detached);
  std::vector<std::pair<uint32_t, double>> out;
  std::vector<std::string> events;
  std::vector<Engine::StartResult> kept;  // alive until the engine and every consumer have stopped
  for (const auto& prompt : prompts) {
    auto& started = kept.emplace_back(engine.start(io.get_executor(), prompt, 2));
    if (!started.sequence) {
      ADD_FAILURE() << "refused: " << started.error;
      break;
    }
    events.clear();
    asio::co_spawn(io, consume(engine, *started.sequence, events, "s"), asio::detached);
    auto returned = [&] { return !events.empty() && (events.back() == "s done" || events.back() == "s cancelled"); };
    // Bounded in time, not in polls: the host cache's copy time is a real timer.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!returned() && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(returned());
    EXPECT_TRUE(started.sequence->finished());
    out.emplace_back(started.sequence->cachedTokens(), started.sequence->promptMs());
  }
  engine.stop();
  io.poll();
  return out;
}

// Ensures the engine drives the slots model: documents A, B, C then A on two slots, A's prefix lost to C without a
// host cache, restored from it with one (its copy time in A's prompt time), and /slots' view of the slots.
TEST(Engine, SlotsModelWithAndWithoutHostCache) {
  std::vector<uint32_t> a = tokenize(std::string(800, 'a'));  // 200 tokens
  std::vector<std::vector<uint32_t>> prompts{a, tokenize(std::string(800, 'b')), tokenize(std::string(800, 'c')),
                                             a};
  auto lost = runInTurn(slotsConfig(2, 0), prompts);
  EXPECT_EQ(lost[3].first, 0u);
  auto restored = runInTurn(slotsConfig(2, 10000), prompts);
  EXPECT_EQ(restored[3].first, 199u);  // the slot held A's 200 prompt tokens and its first output token
  auto free_copy = runInTurn(slotsConfig(2, 10000, 0), prompts);
  EXPECT_NEAR(restored[3].second - free_copy[3].second, 201 * 0.5 / 1000, 1e-9);
}

// Ensures a slots engine refuses a request that a slot's context cannot hold, and reports its slots.
TEST(Engine, SlotsModelRefusesWhatASlotCannotHoldAndShowsSlots) {
  asio::io_context io;
  Engine engine(slotsConfig(2, 0));
  auto refused = engine.start(io.get_executor(), tokenize(std::string(4000, 'x')), 100);  // 1000 + 100 > 1024
  EXPECT_FALSE(refused.sequence);
  EXPECT_NE(refused.error.find("exceeds the available context size (1024 tokens)"), std::string::npos);
  auto waiting = engine.start(io.get_executor(), tokenize("hello"), 2);
  MetricsSnapshot snapshot = engine.snapshot();
  ASSERT_EQ(snapshot.slots.size(), 2u);
  EXPECT_FALSE(snapshot.slots[0].used);
  EXPECT_EQ(snapshot.num_requests_waiting, 1u);
}

// Ensures SGLang's dialect gets SGLang's histogram bounds, the others vLLM's.
TEST(Engine, HistogramBoundsFollowTheDialect) {
  SimConfig config = instantConfig(4);
  config.engine_dialect = "sglang";
  EXPECT_EQ(Engine(config).histograms().time_to_first_token.upperBounds().front(), 0.1);
  EXPECT_EQ(Engine(instantConfig(4)).histograms().time_to_first_token.upperBounds().front(), 0.001);
}

}  // namespace
}  // namespace prefixgate::sim
