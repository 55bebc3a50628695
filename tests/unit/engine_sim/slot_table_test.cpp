// llama-server's slot choice (get_available_slot) and its host prompt cache calls: similarity over the threshold,
// least recently used otherwise, busy slots skipped, nothing while all are busy, cached tokens capped at prompt - 1,
// save on overwrite and restore when an entry fits better.
#include "engine_sim/slot_table.h"

#include <gtest/gtest.h>
#include "unit/token_runs.h"

namespace prefixgate::sim {
namespace {

using testing::tokens;
using testing::concat;

SlotTableConfig slotsConfig(uint32_t slots, uint64_t host_cache_tokens = 0, bool save_idle_slots = false) {
  return SlotTableConfig{slots, 0.1f, host_cache_tokens, save_idle_slots};
}

// Assigns `prompt` and releases its slot at once, holding the prompt (as a prefill-only request would).
uint32_t serve(SlotTable& table, const std::vector<uint32_t>& prompt) {
  std::optional<SlotAssignment> assigned = table.assign(prompt, true);
  EXPECT_TRUE(assigned.has_value());
  table.release(assigned->slot, prompt);
  return assigned->slot;
}

// Ensures never-used slots are taken first, the highest id first (llama-server's `t_last_used <= t_last`), and a
// prompt that shares nothing finds nothing cached.
TEST(SlotTable, EmptySlotsFirst) {
  SlotTable table(slotsConfig(3));
  auto first = table.assign(tokens(0, 10), true);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->slot, 2u);
  EXPECT_FALSE(first->by_similarity);
  EXPECT_EQ(first->cached_tokens, 0u);
  EXPECT_EQ(table.assign(tokens(100, 10), true)->slot, 1u);
}

// Ensures the idle slot with the longest common prefix is chosen when that prefix is over the similarity threshold
// of the prompt, and the request finds that prefix cached.
TEST(SlotTable, SimilarityPicksLongestCommonPrefix) {
  SlotTable table(slotsConfig(3));
  uint32_t a = serve(table, concat(tokens(0, 30), tokens(500, 10)));
  // 30 of its 310 tokens in common with a: under the threshold, so b gets a slot of its own.
  uint32_t b = serve(table, concat(tokens(0, 60), tokens(600, 250)));
  serve(table, tokens(1000, 50));
  auto assigned = table.assign(concat(tokens(0, 80), tokens(700, 20)), true);
  ASSERT_TRUE(assigned);
  EXPECT_NE(a, b);
  EXPECT_EQ(assigned->slot, b);
  EXPECT_TRUE(assigned->by_similarity);
  EXPECT_EQ(assigned->cached_tokens, 60u);
}

// Ensures a common prefix at or under the threshold does not choose a slot: the least recently used idle slot is
// taken instead (still finding whatever prefix it happens to share).
TEST(SlotTable, BelowThresholdTakesLeastRecentlyUsed) {
  SlotTable table(slotsConfig(2));
  uint32_t older = serve(table, tokens(5000, 100));
  uint32_t newer = serve(table, concat(tokens(0, 20), tokens(600, 80)));
  // Shares 10 of 100 tokens with `newer`: 0.1 is not over 0.1.
  auto assigned = table.assign(concat(tokens(0, 10), tokens(700, 90)), true);
  ASSERT_TRUE(assigned);
  EXPECT_EQ(assigned->slot, older);
  EXPECT_FALSE(assigned->by_similarity);
  EXPECT_EQ(assigned->cached_tokens, 0u);
  table.release(assigned->slot, tokens(9000, 5));
  // Now `newer` is the least recently used; 11 of 100 is over the threshold anyway.
  auto next = table.assign(concat(tokens(0, 11), tokens(800, 89)), true);
  EXPECT_EQ(next->slot, newer);
  EXPECT_TRUE(next->by_similarity);
  EXPECT_EQ(next->cached_tokens, 11u);
}

// Ensures --slot-prompt-similarity 0 disables the similarity choice: always the least recently used idle slot.
TEST(SlotTable, ZeroSimilarityIsRecencyOnly) {
  SlotTableConfig config = slotsConfig(2);
  config.prompt_similarity = 0;
  SlotTable table(config);
  uint32_t holder = serve(table, tokens(0, 50));
  serve(table, tokens(1000, 50));
  auto assigned = table.assign(tokens(0, 50), true);
  EXPECT_EQ(assigned->slot, holder);  // the least recently used happens to hold it
  EXPECT_FALSE(assigned->by_similarity);
  EXPECT_EQ(assigned->cached_tokens, 49u);
}

// Ensures a busy slot is never chosen, even when it holds the prompt's prefix: a second request of the same
// prefix takes another slot and misses (a busy-slot miss); while every slot is busy nothing is assigned.
TEST(SlotTable, BusySlotsAreSkipped) {
  SlotTable table(slotsConfig(2));
  std::vector<uint32_t> prompt = tokens(0, 40);
  serve(table, prompt);
  auto first = table.assign(prompt, true);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->cached_tokens, 39u);
  auto second = table.assign(prompt, true);
  ASSERT_TRUE(second);
  EXPECT_NE(second->slot, first->slot);
  EXPECT_EQ(second->cached_tokens, 0u);
  EXPECT_FALSE(table.assign(prompt, true).has_value());
  EXPECT_FALSE(table.preview(prompt, true).has_value());
  EXPECT_EQ(table.busyCount(), 2u);
  table.release(first->slot, prompt);
  EXPECT_EQ(table.assign(prompt, true)->slot, first->slot);
}

// Ensures the cached tokens stop at prompt - 1 when the slot holds the whole prompt (the last prompt token is
// evaluated again), whether the slot holds exactly the prompt or more.
TEST(SlotTable, CachedTokensCappedBelowPrompt) {
  SlotTable table(slotsConfig(1));
  serve(table, concat(tokens(0, 20), tokens(300, 20)));
  EXPECT_EQ(table.preview(tokens(0, 20), true)->cached_tokens, 19u);
  auto exact = table.assign(concat(tokens(0, 20), tokens(300, 20)), true);
  EXPECT_EQ(exact->cached_tokens, 39u);
}

// Ensures preview() answers what assign() then does, without changing anything.
TEST(SlotTable, PreviewIsReadOnly) {
  SlotTable table(slotsConfig(2, 1000));
  serve(table, tokens(0, 100));
  serve(table, tokens(1000, 100));
  serve(table, tokens(2000, 100));  // overwrites the slot that held tokens(0, 100), saving it
  std::vector<uint32_t> prompt = concat(tokens(0, 100), tokens(50, 5));
  auto preview = table.preview(prompt, true);
  auto again = table.preview(prompt, true);
  ASSERT_TRUE(preview && again);
  EXPECT_EQ(preview->cached_tokens, again->cached_tokens);
  size_t entries = table.hostCache().size();
  auto assigned = table.assign(prompt, true);
  EXPECT_EQ(assigned->slot, preview->slot);
  EXPECT_EQ(assigned->cached_tokens, preview->cached_tokens);
  EXPECT_EQ(assigned->restored_tokens, preview->restored_tokens);
  EXPECT_EQ(assigned->saved, preview->saved);
  EXPECT_EQ(preview->cached_tokens, 100u);
  EXPECT_EQ(table.hostCache().size(), entries);  // one saved (the slot's), one restored
}

// Ensures a slot chosen by recency is saved to the host cache before it is overwritten, and that without a host
// cache the overwritten prefix is simply lost: documents A, B, C then A again on two slots.
TEST(SlotTable, OverwrittenSlotLostWithoutHostCache) {
  SlotTable table(slotsConfig(2));
  std::vector<uint32_t> a = tokens(0, 100);
  serve(table, a);
  serve(table, tokens(1000, 100));
  serve(table, tokens(2000, 100));  // takes a's slot
  auto again = table.assign(a, true);
  EXPECT_EQ(again->cached_tokens, 0u);
  EXPECT_EQ(again->restored_tokens, 0u);
}

// Ensures the same sequence with a host cache: A is saved when C overwrites its slot, and restored when A comes
// back (f_keep 1, better than the slot it gets).
TEST(SlotTable, HostCacheRestoresOverwrittenPrefix) {
  SlotTable table(slotsConfig(2, 1000));
  std::vector<uint32_t> a = tokens(0, 100);
  serve(table, a);
  serve(table, tokens(1000, 100));
  auto c = table.assign(tokens(2000, 100), true);
  EXPECT_TRUE(c->saved);
  table.release(c->slot, tokens(2000, 100));
  ASSERT_EQ(table.hostCache().size(), 1u);
  EXPECT_EQ(table.hostCache().entry(0), a);
  auto again = table.assign(concat(a, tokens(3000, 10)), true);
  EXPECT_EQ(again->restored_tokens, 100u);
  EXPECT_EQ(again->cached_tokens, 100u);
  EXPECT_TRUE(again->saved);  // B's slot was saved first
  EXPECT_EQ(table.hostCache().size(), 1u);  // A left the cache (it is in the slot), B went in
  EXPECT_EQ(table.hostCache().entry(0), tokens(1000, 100));
}

// Ensures a slot chosen by similarity is saved only when the prompt keeps less than half of its tokens, and that
// the host cache is not touched for requests that do not use it (llama-server: completion tasks only).
TEST(SlotTable, SimilarityChoiceSavesOnlyWhenKeepingLessThanHalf) {
  SlotTable table(slotsConfig(1, 1000));
  serve(table, concat(tokens(0, 60), tokens(500, 40)));
  auto keeps_most = table.assign(concat(tokens(0, 60), tokens(600, 10)), true);  // keeps 60 of 100
  EXPECT_TRUE(keeps_most->by_similarity);
  EXPECT_FALSE(keeps_most->saved);
  table.release(0, concat(tokens(0, 60), tokens(600, 40)));
  auto no_cache = table.assign(concat(tokens(0, 40), tokens(700, 10)), false);  // keeps 40 of 100
  EXPECT_FALSE(no_cache->saved);
  table.release(0, concat(tokens(0, 40), tokens(700, 60)));
  auto keeps_less = table.assign(concat(tokens(0, 40), tokens(800, 10)), true);  // keeps 40 of 100
  EXPECT_TRUE(keeps_less->by_similarity);
  EXPECT_TRUE(keeps_less->saved);
  EXPECT_EQ(table.hostCache().size(), 1u);
}

// Ensures --host-cache-idle-slots: after an assignment every idle slot's tokens are copied to the host cache (the
// slots keep them), so a slot later overwritten by a similar prompt can still be restored.
TEST(SlotTable, IdleSlotsAreSavedAfterEachAssignment) {
  SlotTable table(slotsConfig(3, 1000, true));
  serve(table, tokens(0, 50));
  serve(table, tokens(1000, 50));
  EXPECT_EQ(table.hostCache().size(), 1u);  // the second assignment saved the first slot
  auto third = table.assign(tokens(2000, 50), true);
  EXPECT_EQ(table.hostCache().size(), 2u);
  EXPECT_EQ(table.held(third->slot).size(), 0u);
  EXPECT_EQ(table.assign(tokens(0, 50), true)->cached_tokens, 49u);  // the slot still holds it
}

// Ensures clear() empties slots and host cache, and is refused while a slot is busy.
TEST(SlotTable, ClearRefusedWhileBusy) {
  SlotTable table(slotsConfig(1, 1000));
  auto busy = table.assign(tokens(0, 10), true);
  EXPECT_FALSE(table.clear());
  table.release(busy->slot, tokens(0, 10));
  EXPECT_TRUE(table.clear());
  EXPECT_EQ(table.preview(tokens(0, 10), true)->cached_tokens, 0u);
}

}  // namespace
}  // namespace prefixgate::sim
