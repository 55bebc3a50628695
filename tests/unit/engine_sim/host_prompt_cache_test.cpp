// llama-server's host prompt cache (server_prompt_cache: alloc, load, update), bounded in tokens: what a save keeps,
// replaces and evicts, and which entry a slot restores for a prompt.
#include "engine_sim/host_prompt_cache.h"

#include <gtest/gtest.h>
#include "unit/token_runs.h"

namespace prefixgate::sim {
namespace {

using testing::tokens;
using testing::concat;

// `n` distinct tokens starting at `first`.
// Ensures the common prefix counts leading equal tokens only.
TEST(HostPromptCache, CommonPrefix) {
  EXPECT_EQ(commonPrefix(tokens(0, 10), tokens(0, 4)), 4u);
  EXPECT_EQ(commonPrefix(tokens(0, 10), concat(tokens(0, 3), tokens(100, 5))), 3u);
  EXPECT_EQ(commonPrefix(tokens(0, 10), {}), 0u);
}

// Ensures a save keeps nothing when off, empty, already held by an entry, or larger than the whole cache.
TEST(HostPromptCache, SaveSkipsWhatItNeedNotKeep) {
  HostPromptCache off(0);
  EXPECT_FALSE(off.save(tokens(0, 10)));
  HostPromptCache cache(100);
  EXPECT_FALSE(cache.save({}));
  EXPECT_TRUE(cache.save(tokens(0, 40)));
  EXPECT_FALSE(cache.save(tokens(0, 40)));  // the same sequence
  EXPECT_FALSE(cache.save(tokens(0, 25)));  // a prefix of an entry: "already in the cache"
  EXPECT_FALSE(cache.save(tokens(500, 101)));  // over the limit: skipped, nothing evicted for it
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.tokens(), 40u);
}

// Ensures an entry whose tokens are a prefix of the sequence saved is replaced by it (the conversation's next
// turn supersedes its previous one).
TEST(HostPromptCache, SaveReplacesEntriesItExtends) {
  HostPromptCache cache(1000);
  cache.save(tokens(0, 40));
  cache.save(tokens(200, 10));
  EXPECT_TRUE(cache.save(concat(tokens(0, 40), tokens(900, 20))));
  ASSERT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.entry(0), tokens(200, 10));
  EXPECT_EQ(cache.entry(1).size(), 60u);
  EXPECT_EQ(cache.tokens(), 70u);
}

// Ensures the token bound evicts the oldest entries first, and that an entry restored (taken) then saved again
// counts as the newest: least recently used first.
TEST(HostPromptCache, BoundEvictsLeastRecentlyUsed) {
  HostPromptCache cache(100);
  cache.save(tokens(0, 40));    // a
  cache.save(tokens(100, 40));  // b
  std::vector<uint32_t> a = cache.take(0);  // a restored into a slot: it leaves the cache
  EXPECT_EQ(cache.tokens(), 40u);
  cache.save(a);                // and is saved again later: now the newest
  cache.save(tokens(200, 40));  // c: 120 tokens would not fit, so the oldest (b) goes
  ASSERT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.entry(0), tokens(0, 40));
  EXPECT_EQ(cache.entry(1), tokens(200, 40));
  EXPECT_LE(cache.tokens(), cache.limitTokens());
}

// Ensures planSave predicts save() exactly: whether it saves and which entries go.
TEST(HostPromptCache, PlanSaveMatchesSave) {
  HostPromptCache cache(100);
  cache.save(tokens(0, 30));
  cache.save(tokens(100, 30));
  cache.save(tokens(200, 30));
  std::vector<uint32_t> next = concat(tokens(100, 30), tokens(900, 30));  // extends b; needs room
  HostPromptCache::SavePlan plan = cache.planSave(next);
  ASSERT_TRUE(plan.save);
  EXPECT_EQ(plan.dropped, (std::vector<bool>{true, true, false}));  // a (oldest, for room) and b (extended)
  cache.save(next);
  ASSERT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.entry(0), tokens(200, 30));
  EXPECT_EQ(cache.entry(1), next);
}

// Ensures load's choice: an entry must keep at least a quarter of itself and beat the slot on both f_keep and
// f_sim; among several, the first that improves on the best so far (oldest first) wins.
TEST(HostPromptCache, FindBetterNeedsKeepAndSimilarity) {
  HostPromptCache cache(100000);
  std::vector<uint32_t> prefix = tokens(0, 100);
  std::vector<uint32_t> prompt = concat(prefix, tokens(5000, 20));
  cache.save(concat(prefix, tokens(7000, 900)));  // shares 100 of its 1000 tokens: f_keep 0.1 < 0.25
  EXPECT_FALSE(cache.findBetter({}, prompt).has_value());
  cache.save(concat(tokens(0, 60), tokens(8000, 40)));  // shares 60 of 100: f_keep 0.6, f_sim 0.5
  EXPECT_EQ(cache.findBetter({}, prompt), 1u);          // an empty slot: any qualifying entry wins
  std::vector<uint32_t> held = concat(tokens(0, 80), tokens(9000, 20));  // the slot shares 80 of 100
  EXPECT_FALSE(cache.findBetter(held, prompt).has_value());  // entry 1 keeps less and matches less
  cache.save(concat(prefix, tokens(6000, 10)));  // shares 100 of 110
  EXPECT_EQ(cache.findBetter(held, prompt), 2u);
  EXPECT_FALSE(cache.findBetter(held, prompt, {false, false, true}).has_value());  // planned to be dropped
}

// Ensures an entry that matches more of the prompt but keeps a smaller fraction of itself than the slot does is
// not restored (load wants both better).
TEST(HostPromptCache, FindBetterKeepsSlotWhenEntryKeepsLess) {
  HostPromptCache cache(100000);
  std::vector<uint32_t> prompt = tokens(0, 100);
  cache.save(concat(tokens(0, 90), tokens(5000, 200)));  // f_sim 0.9, f_keep 90/290 = 0.31
  std::vector<uint32_t> held = concat(tokens(0, 50), tokens(6000, 10));  // f_sim 0.5, f_keep 50/60 = 0.83
  EXPECT_FALSE(cache.findBetter(held, prompt).has_value());
  EXPECT_EQ(cache.findBetter(tokens(9000, 10), prompt), 0u);  // a slot sharing nothing: f_keep 0
}

}  // namespace
}  // namespace prefixgate::sim
