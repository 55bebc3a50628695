// The slots KV cache model's step scheduler (llama-server's update_slots): slot assignment and deferral, decodes
// before prompt chunks, what a slot keeps after its request, host cache restores in the step plan, and the
// per-slot context limit.
#include "engine_sim/slot_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include "unit/token_runs.h"

namespace prefixgate::sim {
namespace {

using testing::tokens;
using testing::concat;

SlotSchedulerConfig config(uint32_t slots, uint64_t host_cache_tokens = 0, uint32_t budget = 8192,
                           uint64_t slot_context = 4096) {
  return SlotSchedulerConfig{SlotTableConfig{slots, 0.1f, host_cache_tokens, false}, slot_context, budget, 16};
}

int drain(SlotScheduler& scheduler, int max_steps = 10000) {
  int steps = 0;
  while (scheduler.hasWork() && steps < max_steps) {
    scheduler.complete(scheduler.schedule());
    ++steps;
  }
  EXPECT_FALSE(scheduler.hasWork());
  return steps;
}

// Ensures a request is prefilled then decoded in its slot, and that the slot then holds its prompt and output but
// the last token (never computed), as /slots reports.
TEST(SlotScheduler, SlotKeepsPromptAndOutputButTheLast) {
  SlotScheduler scheduler(config(1));
  ASSERT_EQ(scheduler.submit({1, tokens(0, 40), 3}), SubmitStatus::kQueued);
  StepPlan first = scheduler.schedule();
  EXPECT_EQ(first.started, std::vector<SeqId>{1});
  ASSERT_EQ(first.entries.size(), 1u);
  EXPECT_EQ(first.entries[0].new_tokens, 40u);
  EXPECT_FALSE(first.entries[0].decode);
  EXPECT_EQ(scheduler.slots()[0].processing, true);
  scheduler.complete(first);
  EXPECT_EQ(drain(scheduler), 2);  // two decode steps
  std::vector<SlotView> slots = scheduler.slots();
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_FALSE(slots[0].processing);
  EXPECT_TRUE(slots[0].used);
  EXPECT_EQ(slots[0].task, 1u);
  EXPECT_EQ(slots[0].held_tokens, 42u);
  EXPECT_EQ(slots[0].processed_tokens, 40u);
  EXPECT_EQ(scheduler.table().held(0).size(), 42u);
  EXPECT_EQ(scheduler.counters().generation_tokens, 3u);
}

// Ensures a request waits (deferred, FIFO) while every slot is busy, and gets the first slot released.
TEST(SlotScheduler, WaitsWhileEverySlotIsBusy) {
  SlotScheduler scheduler(config(2));
  scheduler.submit({1, tokens(0, 10), 1});
  scheduler.submit({2, tokens(100, 10), 5});
  scheduler.submit({3, tokens(200, 10), 1});
  scheduler.submit({4, tokens(300, 10), 1});
  StepPlan first = scheduler.schedule();
  EXPECT_EQ(first.started, (std::vector<SeqId>{1, 2}));
  EXPECT_EQ(scheduler.numRunning(), 2u);
  EXPECT_EQ(scheduler.numWaiting(), 2u);
  EXPECT_FALSE(scheduler.status(3)->running);
  StepOutcome out = scheduler.complete(first);
  EXPECT_EQ(out.finished, std::vector<SeqId>{1});  // one output token: done after its prefill
  StepPlan second = scheduler.schedule();
  EXPECT_EQ(second.started, std::vector<SeqId>{3});  // the oldest waiting request
  EXPECT_EQ(scheduler.numWaiting(), 1u);
  drain(scheduler);
}

// Ensures two concurrent requests of the same prefix cannot share it: the first takes the slot holding it, the
// second another slot, and misses.
TEST(SlotScheduler, SecondRequestOfABusyPrefixMisses) {
  SlotScheduler scheduler(config(2));
  std::vector<uint32_t> prefix = tokens(0, 100);
  scheduler.submit({1, prefix, 1});
  drain(scheduler);
  scheduler.submit({2, concat(prefix, tokens(5000, 10)), 2});
  scheduler.submit({3, concat(prefix, tokens(6000, 10)), 2});
  StepPlan plan = scheduler.schedule();
  EXPECT_EQ(scheduler.status(2)->cached_tokens, 100);
  EXPECT_EQ(scheduler.status(3)->cached_tokens, 0);
  EXPECT_EQ(scheduler.counters().prefix_cache_queries, 100u + 110u + 110u);
  EXPECT_EQ(scheduler.counters().prefix_cache_hits, 100u);
  scheduler.complete(plan);
  drain(scheduler);
}

// Ensures every generating slot's token goes into the step before any prompt chunk, and prompt chunks then fill
// the token budget in slot order.
TEST(SlotScheduler, DecodesFirstThenPromptChunks) {
  SlotScheduler scheduler(config(2, 0, 10));
  scheduler.submit({1, tokens(0, 8), 5});
  scheduler.complete(scheduler.schedule());  // 1 prefilled, sampled its first token
  scheduler.submit({2, tokens(100, 30), 1});
  StepPlan plan = scheduler.schedule();
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].id, 1u);
  EXPECT_TRUE(plan.entries[0].decode);
  EXPECT_EQ(plan.entries[0].computed_before, 8u);
  EXPECT_EQ(plan.entries[1].id, 2u);
  EXPECT_EQ(plan.entries[1].new_tokens, 9u);  // the rest of the budget
  scheduler.complete(plan);
  drain(scheduler);
}

// Ensures the next turn of a conversation, carrying the reply, finds the prompt and the reply's computed tokens
// in the slot.
TEST(SlotScheduler, NextTurnHitsPromptAndOutput) {
  SlotScheduler scheduler(config(2));
  std::vector<uint32_t> prompt = tokens(0, 50);
  scheduler.submit({1, prompt, 5});
  drain(scheduler);
  OutputText output = OutputText::forPrompt(prompt);
  std::vector<uint32_t> next = prompt;
  for (uint32_t i = 0; i < 5; ++i) next.push_back(output.tokenId(i));
  next = concat(next, tokens(9000, 10));
  EXPECT_EQ(scheduler.cachedPrefixTokens(next), 54u);  // the last reply token was never computed
  scheduler.submit({2, next, 1});
  scheduler.schedule();
  EXPECT_EQ(scheduler.status(2)->cached_tokens, 54);
}

// Ensures a prefix restored from the host cache counts as cached and its size goes into the step plan (its copy
// costs time), and that without a host cache the overwritten prefix misses.
TEST(SlotScheduler, HostCacheRestoreIsInThePlan) {
  for (uint64_t host_cache : {uint64_t{0}, uint64_t{10000}}) {
    SlotScheduler scheduler(config(2, host_cache));
    std::vector<uint32_t> a = tokens(0, 100);
    SeqId id = 1;
    for (uint32_t first : {0u, 1000u, 2000u}) {
      scheduler.submit({id++, tokens(first, 100), 1});  // one output token, never computed: the slot holds the prompt
      drain(scheduler);
    }
    scheduler.submit({id, concat(a, tokens(7000, 20)), 1});
    StepPlan plan = scheduler.schedule();
    EXPECT_EQ(plan.restored_tokens, host_cache > 0 ? 100u : 0u);
    EXPECT_EQ(scheduler.status(id)->cached_tokens, host_cache > 0 ? 100 : 0);
    EXPECT_EQ(plan.entries[0].new_tokens, host_cache > 0 ? 20u : 120u);
    scheduler.complete(plan);
  }
}

// Ensures a request whose prompt and output cannot fit one slot's context is refused with llama-server's words.
TEST(SlotScheduler, RefusesWhatExceedsASlot) {
  SlotScheduler scheduler(config(2, 0, 8192, 100));
  EXPECT_EQ(scheduler.submit({1, tokens(0, 90), 11}), SubmitStatus::kNeverFits);
  EXPECT_EQ(scheduler.submit({2, tokens(0, 90), 10}), SubmitStatus::kQueued);
  EXPECT_EQ(scheduler.submit({2, tokens(0, 90), 10}), SubmitStatus::kDuplicate);
  EXPECT_NE(scheduler.neverFitsReason(90, 11).find("exceeds the available context size (100 tokens)"),
            std::string::npos);
}

// Ensures an aborted running request frees its slot, which keeps the tokens computed so far, and an aborted
// waiting request leaves the queue.
TEST(SlotScheduler, AbortFreesTheSlot) {
  SlotScheduler scheduler(config(1, 0, 16));
  scheduler.submit({1, tokens(0, 40), 3});
  scheduler.submit({2, tokens(100, 10), 3});
  StepPlan plan = scheduler.schedule();  // 16 of 1's 40 prompt tokens
  EXPECT_EQ(scheduler.numWaiting(), 1u);
  scheduler.abort(2);
  EXPECT_EQ(scheduler.numWaiting(), 0u);
  scheduler.abort(1);
  EXPECT_FALSE(scheduler.hasWork());
  EXPECT_TRUE(scheduler.complete(plan).sampled.empty());
  EXPECT_EQ(scheduler.table().held(0), tokens(0, 16));
  EXPECT_FALSE(scheduler.slots()[0].processing);
}

// Ensures cachedPrefixTokens reads only (asking twice, then assigning, gives the same answer) and says 0 while no
// slot is idle; usage counts the busy slots' tokens.
TEST(SlotScheduler, CacheMatchReadsOnly) {
  SlotScheduler scheduler(config(1, 0, 8192, 1000));
  std::vector<uint32_t> prompt = tokens(0, 100);
  scheduler.submit({1, prompt, 0});
  drain(scheduler);
  EXPECT_EQ(scheduler.cachedPrefixTokens(prompt), 99u);
  EXPECT_EQ(scheduler.cachedPrefixTokens(prompt), 99u);
  EXPECT_EQ(scheduler.kvCacheUsage(), 0);
  scheduler.submit({2, prompt, 5});
  scheduler.complete(scheduler.schedule());
  EXPECT_EQ(scheduler.status(2)->cached_tokens, 99);
  EXPECT_EQ(scheduler.cachedPrefixTokens(prompt), 0u);  // the only slot is busy
  EXPECT_DOUBLE_EQ(scheduler.kvCacheUsage(), 0.1);
  EXPECT_EQ(scheduler.usedBlocks(), 7u);
  EXPECT_TRUE(scheduler.takeEvents().empty());
  EXPECT_FALSE(scheduler.resetPrefixCache());  // refused while a slot is busy
  drain(scheduler);
  EXPECT_TRUE(scheduler.resetPrefixCache());
  EXPECT_EQ(scheduler.cachedPrefixTokens(prompt), 0u);
}

}  // namespace
}  // namespace prefixgate::sim
