// The real-time engine driven by an io_context with --time-scale 0: every delay is zero, so these run instantly
// (no sockets, no sleeps) and check admission, wake-up and cancellation.
#include "engine_sim/engine.h"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

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

asio::awaitable<void> generate(Engine& engine, Engine::Sequence& sequence, uint32_t tokens,
                               std::vector<std::string>& events, std::string name) {
  if (!co_await engine.prefill(sequence)) {
    events.push_back(name + " cancelled");
    co_return;
  }
  events.push_back(name + " first");
  engine.tokenEmitted(sequence);
  for (uint32_t i = 1; i < tokens; ++i) {
    if (!co_await engine.decodeStep(sequence)) co_return;
    engine.tokenEmitted(sequence);
  }
  engine.finish(sequence);
  events.push_back(name + " done");
}

// Ensures a request beyond max_num_seqs waits, runs after the running one finishes, and then hits its cache.
TEST(Engine, WaitingSequenceRunsAfterOtherFinishes) {
  asio::io_context io;
  Engine engine(instantConfig(1));
  std::vector<uint32_t> prompt = tokenize(std::string(200, 'p'));  // 50 tokens, 3 full blocks
  auto a = engine.start(io.get_executor(), prompt, 3);
  auto b = engine.start(io.get_executor(), prompt, 3);
  ASSERT_TRUE(a.sequence && b.sequence);
  EXPECT_EQ(engine.snapshot().num_requests_waiting, 1u);
  std::vector<std::string> events;
  asio::co_spawn(io, generate(engine, *b.sequence, 3, events, "b"), asio::detached);
  asio::co_spawn(io, generate(engine, *a.sequence, 3, events, "a"), asio::detached);
  io.run();
  EXPECT_EQ(events, (std::vector<std::string>{"a first", "a done", "b first", "b done"}));
  EXPECT_EQ(a.sequence->cachedTokens(), 0u);
  EXPECT_EQ(b.sequence->cachedTokens(), 48u);
  MetricsSnapshot snapshot = engine.snapshot();
  EXPECT_EQ(snapshot.num_requests_running, 0u);
  EXPECT_EQ(snapshot.counters.generation_tokens, 6u);
  EXPECT_EQ(engine.histograms().e2e_request_latency.count(), 2u);
  EXPECT_EQ(engine.histograms().time_to_first_token.count(), 2u);
}

// Ensures a cancelled waiting sequence stops waiting and, once destroyed, leaves the queue.
TEST(Engine, CancelledWaitingSequenceLeavesQueue) {
  asio::io_context io;
  Engine engine(instantConfig(1));
  auto a = engine.start(io.get_executor(), tokenize("first"), 2);
  auto b = engine.start(io.get_executor(), tokenize("second"), 2);
  std::vector<std::string> events;
  asio::cancellation_signal cancel;
  asio::co_spawn(io, generate(engine, *b.sequence, 2, events, "b"),
                 asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  io.poll();
  EXPECT_TRUE(events.empty());  // b waits for a slot
  cancel.emit(asio::cancellation_type::terminal);
  io.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"b cancelled"}));
  b.sequence.reset();
  EXPECT_EQ(engine.snapshot().num_requests_waiting, 0u);
  EXPECT_EQ(engine.snapshot().num_requests_running, 1u);
}

// Ensures destroying a running sequence (client gone) frees its slot and admits the next one.
TEST(Engine, DestroyedRunningSequenceFreesSlot) {
  asio::io_context io;
  Engine engine(instantConfig(1));
  auto a = engine.start(io.get_executor(), tokenize("first"), 2);
  auto b = engine.start(io.get_executor(), tokenize("second"), 2);
  EXPECT_EQ(engine.snapshot().num_requests_waiting, 1u);
  a.sequence.reset();
  EXPECT_EQ(engine.snapshot().num_requests_waiting, 0u);
  EXPECT_EQ(engine.snapshot().num_requests_running, 1u);
  std::vector<std::string> events;
  asio::co_spawn(io, generate(engine, *b.sequence, 2, events, "b"), asio::detached);
  io.run();
  EXPECT_EQ(events, (std::vector<std::string>{"b first", "b done"}));
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

}  // namespace
}  // namespace prefixgate::sim
