#include "engine_sim/scheduler.h"

#include <gtest/gtest.h>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

constexpr uint32_t kBlock = 16;

SeqRequest request(SeqId id, std::string_view text, uint32_t max_output = 16) {
  std::vector<uint32_t> tokens = tokenize(text);
  SeqRequest r;
  r.id = id;
  r.blocks = blockHashes(tokens, kBlock);
  r.prompt_tokens = static_cast<uint32_t>(tokens.size());
  r.max_output_tokens = max_output;
  return r;
}

// 64 bytes = 16 tokens = one block per call.
std::string text(char fill, size_t blocks) { return std::string(blocks * kBlock * kBytesPerToken, fill); }

// Ensures a repeated prompt reports its cached full blocks, and a shared prefix only the shared blocks.
TEST(Scheduler, HitsOnSharedPrefix) {
  Scheduler scheduler(1000, kBlock, 8);
  std::string prefix = text('a', 3);
  SubmitResult first = scheduler.submit(request(1, prefix + "first question"));
  ASSERT_EQ(first.status, SubmitStatus::kAdmitted);
  EXPECT_EQ(first.cached_tokens, 0u);
  scheduler.release(1);
  SubmitResult second = scheduler.submit(request(2, prefix + "another question"));
  ASSERT_EQ(second.status, SubmitStatus::kAdmitted);
  EXPECT_EQ(second.cached_tokens, 3 * kBlock);
  EXPECT_EQ(scheduler.counters().prefix_cache_hits, 3 * kBlock);
}

// Ensures a changed early block ends the prefix match there (chained hashes).
TEST(Scheduler, MissAfterChangedBlock) {
  Scheduler scheduler(1000, kBlock, 8);
  scheduler.submit(request(1, text('a', 1) + text('b', 3)));
  scheduler.release(1);
  SubmitResult changed = scheduler.submit(request(2, text('a', 1) + text('c', 1) + text('b', 2)));
  EXPECT_EQ(changed.cached_tokens, kBlock);
}

// Ensures cached_tokens is capped at prompt_tokens - 1: vLLM always recomputes the last prompt token.
TEST(Scheduler, CachedTokensCappedBelowPrompt) {
  Scheduler scheduler(1000, kBlock, 8);
  std::string prompt = text('a', 2);  // exactly two full blocks
  scheduler.submit(request(1, prompt));
  scheduler.release(1);
  SubmitResult again = scheduler.submit(request(2, prompt));
  EXPECT_EQ(again.cached_tokens, 2 * kBlock - 1);
}

// Ensures counters track prompt tokens, cache queries and hits, and generation tokens.
TEST(Scheduler, CountsTokens) {
  Scheduler scheduler(1000, kBlock, 8);
  scheduler.submit(request(1, text('a', 2)));
  scheduler.addGenerationTokens(5);
  scheduler.release(1);
  scheduler.submit(request(2, text('a', 2) + "tail"));
  const EngineCounters& c = scheduler.counters();
  EXPECT_EQ(c.prompt_tokens, 2 * kBlock + 2 * kBlock + 1);
  EXPECT_EQ(c.prefix_cache_queries, c.prompt_tokens);
  EXPECT_EQ(c.prefix_cache_hits, 2 * kBlock);
  EXPECT_EQ(c.generation_tokens, 5u);
  EXPECT_EQ(c.preemptions, 0u);
}

// Ensures at most max_num_seqs run; the rest wait in FIFO order and are admitted as others end.
TEST(Scheduler, MaxNumSeqsQueuesFifo) {
  Scheduler scheduler(1000, kBlock, 2);
  EXPECT_EQ(scheduler.submit(request(1, "one")).status, SubmitStatus::kAdmitted);
  EXPECT_EQ(scheduler.submit(request(2, "two")).status, SubmitStatus::kAdmitted);
  EXPECT_EQ(scheduler.submit(request(3, "three")).status, SubmitStatus::kWaiting);
  EXPECT_EQ(scheduler.submit(request(4, "four")).status, SubmitStatus::kWaiting);
  EXPECT_EQ(scheduler.numRunning(), 2u);
  EXPECT_EQ(scheduler.numWaiting(), 2u);
  std::vector<Admission> admitted = scheduler.release(2);
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0].id, 3u);
  scheduler.release(4);  // a waiting request that gives up just leaves the queue
  EXPECT_EQ(scheduler.numWaiting(), 0u);
  EXPECT_EQ(scheduler.numRunning(), 2u);
}

// Ensures a request waits while the KV cache cannot pin its blocks, and kv usage reflects running sequences.
TEST(Scheduler, WaitsForKvCapacity) {
  Scheduler scheduler(10, kBlock, 8);  // 160 tokens
  SubmitResult big = scheduler.submit(request(1, text('a', 6), kBlock));  // 7 blocks
  ASSERT_EQ(big.status, SubmitStatus::kAdmitted);
  EXPECT_DOUBLE_EQ(scheduler.kvCacheUsage(), 0.7);
  EXPECT_EQ(scheduler.submit(request(2, text('b', 4), kBlock)).status, SubmitStatus::kWaiting);
  std::vector<Admission> admitted = scheduler.release(1);
  ASSERT_EQ(admitted.size(), 1u);
  EXPECT_EQ(admitted[0].id, 2u);
  EXPECT_DOUBLE_EQ(scheduler.kvCacheUsage(), 0.5);
}

// Ensures a request larger than the whole cache is refused rather than queued forever.
TEST(Scheduler, RefusesWhatNeverFits) {
  Scheduler scheduler(4, kBlock, 8);
  SubmitResult result = scheduler.submit(request(1, text('a', 4), 1));
  EXPECT_EQ(result.status, SubmitStatus::kNeverFits);
  EXPECT_EQ(result.blocks_needed, 5u);
  EXPECT_EQ(scheduler.numWaiting(), 0u);
  EXPECT_EQ(Scheduler::blocksNeeded(33, 0, 16), 3u);
}

}  // namespace
}  // namespace prefixgate::sim
