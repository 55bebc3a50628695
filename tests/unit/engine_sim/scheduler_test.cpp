// The step scheduler (vLLM v1's rules): token budget, chunked prefill, prefix hits in whole blocks, block-by-block
// KV allocation, preemption of the newest running sequence, and cached output blocks.
#include "engine_sim/scheduler.h"

#include <gtest/gtest.h>

#include "engine_sim/tokenizer.h"
#include "unit/token_runs.h"

namespace prefixgate::sim {
namespace {

using testing::tokens;
using testing::concat;

constexpr uint32_t kBlock = 16;

SchedulerConfig config(uint64_t blocks, uint32_t max_num_seqs = 8, uint32_t budget = 8192) {
  return SchedulerConfig{blocks, kBlock, max_num_seqs, budget};
}

// `n` distinct tokens starting at `first` (token ids are opaque numbers to the scheduler).
// Runs steps until nothing is left (bounded); returns how many steps it took.
int drain(Scheduler& scheduler, int max_steps = 10000) {
  int steps = 0;
  while (scheduler.hasWork() && steps < max_steps) {
    scheduler.complete(scheduler.schedule());
    ++steps;
  }
  EXPECT_FALSE(scheduler.hasWork());
  return steps;
}

// Ensures a prompt is prefilled in one step, samples its first token at the end of it, then decodes one token
// per step and finishes at max_output_tokens.
TEST(Scheduler, PrefillThenOneTokenPerStep) {
  Scheduler scheduler(config(100));
  ASSERT_EQ(scheduler.submit({1, tokens(0, 40), 3}), SubmitStatus::kQueued);
  StepPlan first = scheduler.schedule();
  ASSERT_EQ(first.entries.size(), 1u);
  EXPECT_EQ(first.entries[0].new_tokens, 40u);
  EXPECT_FALSE(first.entries[0].decode);
  EXPECT_EQ(first.started, std::vector<SeqId>{1});
  StepOutcome out = scheduler.complete(first);
  EXPECT_EQ(out.sampled, std::vector<SeqId>{1});
  StepPlan second = scheduler.schedule();
  ASSERT_EQ(second.entries.size(), 1u);
  EXPECT_EQ(second.entries[0].new_tokens, 1u);
  EXPECT_TRUE(second.entries[0].decode);
  EXPECT_EQ(second.entries[0].computed_before, 40u);
  scheduler.complete(second);
  out = scheduler.complete(scheduler.schedule());
  EXPECT_EQ(out.finished, std::vector<SeqId>{1});
  EXPECT_FALSE(scheduler.hasWork());
  EXPECT_EQ(scheduler.counters().generation_tokens, 3u);
}

// Ensures a prompt longer than the token budget is prefilled in chunks, and decodes go first in a step.
TEST(Scheduler, ChunkedPrefillAfterDecodes) {
  Scheduler scheduler(config(100, 8, 64));
  scheduler.submit({1, tokens(0, 10), 5});
  scheduler.complete(scheduler.schedule());  // 1 prefilled, sampled its first token
  scheduler.submit({2, tokens(1000, 150), 2});
  StepPlan step = scheduler.schedule();
  ASSERT_EQ(step.entries.size(), 2u);
  EXPECT_EQ(step.entries[0].id, 1u);
  EXPECT_TRUE(step.entries[0].decode);
  EXPECT_EQ(step.entries[1].id, 2u);
  EXPECT_EQ(step.entries[1].new_tokens, 63u);  // what the decode left of the budget
  StepOutcome out = scheduler.complete(step);
  EXPECT_EQ(out.sampled, std::vector<SeqId>{1});  // 2 is still prefilling: no token yet
  step = scheduler.schedule();
  EXPECT_EQ(step.entries[1].new_tokens, 63u);
  EXPECT_EQ(step.entries[1].computed_before, 63u);
  scheduler.complete(step);
  step = scheduler.schedule();
  EXPECT_EQ(step.entries[1].new_tokens, 24u);  // the rest of the 150
  out = scheduler.complete(step);
  EXPECT_EQ(out.sampled, (std::vector<SeqId>{1, 2}));
}

// Ensures cached_tokens counts whole matched blocks, at most prompt - 1 tokens (a full hit still recomputes the
// last block), and the counters add up.
TEST(Scheduler, CachedTokensAreWholeBlocksBelowPrompt) {
  Scheduler scheduler(config(100));
  scheduler.submit({1, tokens(0, 32), 1});  // exactly two blocks
  drain(scheduler);
  scheduler.submit({2, tokens(0, 32), 1});
  scheduler.submit({3, concat(tokens(0, 32), tokens(500, 5)), 1});
  StepPlan step = scheduler.schedule();
  EXPECT_EQ(scheduler.status(2)->cached_tokens, 16);  // not 31: whole blocks within the first 31 tokens
  EXPECT_EQ(scheduler.status(3)->cached_tokens, 32);
  EXPECT_EQ(step.entries[0].new_tokens, 16u);
  EXPECT_EQ(step.entries[1].new_tokens, 5u);
  const EngineCounters& c = scheduler.counters();
  EXPECT_EQ(c.prefix_cache_queries, 32u + 32 + 37);
  EXPECT_EQ(c.prefix_cache_hits, 48u);
  EXPECT_EQ(c.prompt_tokens, c.prefix_cache_queries);
}

// Ensures a changed early block ends the prefix match there (chained hashes).
TEST(Scheduler, MissAfterChangedBlock) {
  Scheduler scheduler(config(100));
  scheduler.submit({1, tokens(0, 64), 1});
  drain(scheduler);
  std::vector<uint32_t> changed = tokens(0, 64);
  changed[20] = 99999;  // in the second block
  EXPECT_EQ(scheduler.cachedPrefixTokens(changed), 16u);
  EXPECT_EQ(scheduler.cachedPrefixTokens(tokens(0, 64)), 48u);  // at most prompt - 1
}

// Ensures the full blocks of prompt and generated output stay cached when a request finishes, so the next turn of
// a conversation (prompt + reply + new question) hits beyond the old prompt.
TEST(Scheduler, OutputBlocksStayCached) {
  Scheduler scheduler(config(100));
  std::vector<uint32_t> prompt = tokens(0, 24);
  scheduler.submit({1, prompt, 20});
  drain(scheduler);
  std::vector<uint32_t> next = prompt;
  OutputText reply = OutputText::forPrompt(prompt);
  for (size_t i = 0; i < 20; ++i) next.push_back(reply.tokenId(i));
  next.push_back(77777);
  // 24 + 20 = 44 tokens, 43 computed (the last sampled token never is): two full blocks.
  EXPECT_EQ(scheduler.cachedPrefixTokens(next), 32u);
  EXPECT_EQ(scheduler.cachedPrefixTokens(prompt), 16u);  // the prompt alone: one block below its 23 tokens
}

// Ensures at most max_num_seqs run; the rest wait in FIFO order and are admitted as others finish.
TEST(Scheduler, MaxNumSeqsQueuesFifo) {
  Scheduler scheduler(config(100, 2));
  for (SeqId id = 1; id <= 4; ++id) scheduler.submit({id, tokens(static_cast<uint32_t>(id) * 100, 4), 2});
  StepPlan step = scheduler.schedule();
  EXPECT_EQ(step.started, (std::vector<SeqId>{1, 2}));
  EXPECT_EQ(scheduler.numRunning(), 2u);
  EXPECT_EQ(scheduler.numWaiting(), 2u);
  scheduler.complete(step);
  scheduler.abort(4);  // a waiting request whose client left just leaves the queue
  EXPECT_EQ(scheduler.numWaiting(), 1u);
  scheduler.complete(scheduler.schedule());  // 1 and 2 finish
  step = scheduler.schedule();
  EXPECT_EQ(step.started, std::vector<SeqId>{3});
}

// Ensures that when decodes run out of KV blocks, the newest running sequence is preempted (blocks freed, back to
// the head of the queue, counted), nobody is admitted in that step, and it later recomputes (hitting what is left
// of its own cached blocks) and completes.
TEST(Scheduler, PreemptsNewestWhenOutOfBlocks) {
  Scheduler scheduler(config(4));               // 64 tokens
  scheduler.submit({1, tokens(0, 16), 20});     // computes up to 35 tokens: 3 blocks by its end
  scheduler.submit({2, tokens(100, 16), 20});   // likewise
  StepPlan step = scheduler.schedule();
  EXPECT_EQ(step.started, (std::vector<SeqId>{1, 2}));  // one block each
  scheduler.complete(step);
  scheduler.complete(scheduler.schedule());  // token 17 of each: a second block each, none free now
  scheduler.submit({3, tokens(300, 4), 1});
  for (int i = 0; i < 15; ++i) {  // tokens 18..32 fit the two blocks each holds
    step = scheduler.schedule();
    ASSERT_TRUE(step.preempted.empty());
    scheduler.complete(step);
  }
  EXPECT_FALSE(scheduler.status(3)->running);  // no free block to admit it
  step = scheduler.schedule();  // 1 needs a third block: 2, the newest, makes room
  EXPECT_EQ(step.preempted, std::vector<SeqId>{2});
  ASSERT_EQ(step.entries.size(), 1u);
  EXPECT_EQ(step.entries[0].id, 1u);
  EXPECT_TRUE(step.started.empty());  // nobody is admitted in a step that preempted
  EXPECT_EQ(scheduler.counters().preemptions, 1u);
  EXPECT_EQ(scheduler.status(2)->preemptions, 1u);
  EXPECT_FALSE(scheduler.status(2)->running);
  EXPECT_EQ(scheduler.numWaiting(), 2u);
  scheduler.complete(step);
  drain(scheduler);
  EXPECT_EQ(scheduler.counters().generation_tokens, 20u + 20 + 1);
  // The preempted sequence's second lookup is not counted (vLLM keeps it apart).
  EXPECT_EQ(scheduler.counters().prefix_cache_queries, 16u + 16 + 4);
}

// Ensures an aborted running sequence frees its blocks and is skipped when its step completes.
TEST(Scheduler, AbortFreesBlocksAndSkipsCompletion) {
  Scheduler scheduler(config(10));
  scheduler.submit({1, tokens(0, 40), 4});
  StepPlan step = scheduler.schedule();
  EXPECT_DOUBLE_EQ(scheduler.kvCacheUsage(), 0.3);
  scheduler.abort(1);
  EXPECT_DOUBLE_EQ(scheduler.kvCacheUsage(), 0.0);
  StepOutcome out = scheduler.complete(step);
  EXPECT_TRUE(out.sampled.empty());
  EXPECT_FALSE(scheduler.hasWork());
  EXPECT_EQ(scheduler.cachedPrefixTokens(tokens(0, 40)), 32u);  // its computed full blocks stay cached
}

// Ensures a prefill-only sequence (embeddings) finishes when its prompt is computed, without a token.
TEST(Scheduler, PrefillOnlyFinishesWithoutToken) {
  Scheduler scheduler(config(10));
  scheduler.submit({1, tokens(0, 20), 0});
  StepOutcome out = scheduler.complete(scheduler.schedule());
  EXPECT_TRUE(out.sampled.empty());
  EXPECT_EQ(out.finished, std::vector<SeqId>{1});
  EXPECT_EQ(scheduler.counters().generation_tokens, 0u);
}

// Ensures a request larger than the whole cache is refused rather than queued forever.
TEST(Scheduler, RefusesWhatNeverFits) {
  Scheduler scheduler(config(4));
  EXPECT_EQ(scheduler.submit({1, tokens(0, 64), 1}), SubmitStatus::kNeverFits);
  EXPECT_EQ(scheduler.submit({2, tokens(0, 60), 4}), SubmitStatus::kQueued);
  EXPECT_EQ(scheduler.submit({2, tokens(0, 4), 1}), SubmitStatus::kDuplicate);
  EXPECT_EQ(scheduler.numWaiting(), 1u);
  EXPECT_EQ(Scheduler::blocksNeeded(33, 0, 16), 3u);
}

}  // namespace
}  // namespace prefixgate::sim
