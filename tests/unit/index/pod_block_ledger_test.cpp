// Capacity-aware standard mode's ledger: per pod, least recently routed blocks beyond the pod's capacity drop out.
#include "index/pod_block_ledger.h"

#include <gtest/gtest.h>

#include <thread>

#include "unit/index/manual_clock.h"

namespace prefixgate::index {
namespace {

std::vector<BlockHash> chain(std::initializer_list<uint64_t> values) {
  std::vector<BlockHash> out;
  for (uint64_t v : values) out.push_back(BlockHash{v});
  return out;
}

// Ensures nothing drops out while a pod holds no more than its capacity, and the oldest blocks drop out beyond it,
// a prompt's tail before its head.
TEST(PodBlockLedger, EvictsLeastRecentlyRoutedBeyondCapacity) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touch(PodId{1}, "m", chain({1, 2, 3}), 4, evicted);
  EXPECT_TRUE(evicted.empty());
  ledger.touch(PodId{1}, "m", chain({10, 11}), 4, evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].model, "m");
  EXPECT_EQ(evicted[0].hashes, chain({3}));  // the first prompt's tail
  EXPECT_EQ(ledger.blocks(PodId{1}), 4u);
}

// Ensures forgotten blocks (their request failed before the engine computed them) stop counting against the pod's
// capacity, so the blocks it does hold are not pushed out by them; other pods and models keep theirs.
TEST(PodBlockLedger, ForgottenBlocksFreeTheirCapacity) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touch(PodId{1}, "m", chain({1, 2}), 4, evicted);
  ledger.touch(PodId{1}, "m", chain({1, 2, 3, 4}), 4, evicted);
  ledger.touch(PodId{2}, "m", chain({3, 4}), 4, evicted);
  ledger.forget(PodId{1}, "m", chain({3, 4}));
  ledger.forget(PodId{1}, "other", chain({1, 2}));  // another model's blocks of the same hashes: none
  ledger.forget(PodId{9}, "m", chain({1}));         // a pod it never saw: nothing
  EXPECT_EQ(ledger.blocks(PodId{1}), 2u);
  EXPECT_EQ(ledger.blocks(PodId{2}), 2u);
  ledger.touch(PodId{1}, "m", chain({7, 8}), 4, evicted);
  EXPECT_TRUE(evicted.empty());  // without the forget, 1 and 2 would now be gone
}

// Ensures routing a block again makes it recent, so it outlives blocks routed in between.
TEST(PodBlockLedger, RoutingAgainRefreshes) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touch(PodId{1}, "m", chain({1, 2}), 3, evicted);
  ledger.touch(PodId{1}, "m", chain({5}), 3, evicted);
  ledger.touch(PodId{1}, "m", chain({1, 2}), 3, evicted);  // the shared prefix again
  ledger.touch(PodId{1}, "m", chain({7}), 3, evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hashes, chain({5}));
}

// Ensures pods and models are accounted separately, and an unknown capacity (0) evicts nothing.
TEST(PodBlockLedger, PodsAndModelsAreSeparate) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touch(PodId{1}, "a", chain({1, 2}), 2, evicted);
  ledger.touch(PodId{2}, "a", chain({1, 2}), 2, evicted);
  ledger.touch(PodId{1}, "b", chain({1}), 2, evicted);  // the same hash under another model is another block
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].model, "a");
  EXPECT_EQ(evicted[0].hashes, chain({2}));
  EXPECT_EQ(ledger.blocks(PodId{2}), 2u);
  evicted.clear();
  ledger.touch(PodId{3}, "a", chain({1, 2, 3, 4}), 0, evicted);
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(ledger.blocks(PodId{3}), 0u);
  ledger.removePod(PodId{1});
  EXPECT_EQ(ledger.blocks(PodId{1}), 0u);
}

// Ensures two threads routing to the same pod keep the ledger consistent (run under the sanitizers too).
TEST(PodBlockLedger, ConcurrentTouches) {
  PodBlockLedger ledger;
  auto work = [&](uint64_t base) {
    std::vector<PodBlockLedger::Evicted> evicted;
    for (uint64_t i = 0; i < 2000; ++i) ledger.touch(PodId{1}, "m", chain({base + i, base + i + 1}), 100, evicted);
  };
  std::thread a(work, 0), b(work, 1000000);
  a.join();
  b.join();
  EXPECT_EQ(ledger.blocks(PodId{1}), 100u);
}

// Ensures a slot engine holds at most its slots' prompts: a prompt sharing a slot's prefix takes that slot (what
// it held beyond the shared prefix goes), a new prompt takes an empty slot, then the least recently used one.
TEST(PodBlockLedgerSlots, PromptsTakeSlotsLikeLlamaCpp) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4}), 2, evicted);
  ledger.touchSlots(PodId{1}, "m", chain({10, 11, 12}), 2, evicted);
  EXPECT_TRUE(evicted.empty());  // two prompts, two slots
  // A follow-up of the first prompt reuses its slot: its old tail (4) goes, the shared 1, 2, 3 stay.
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 5, 6}), 2, evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hashes, chain({4}));
  evicted.clear();
  // A third prompt: the least recently used slot (10, 11, 12) is overwritten.
  ledger.touchSlots(PodId{1}, "m", chain({20, 21}), 2, evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hashes, chain({10, 11, 12}));
}

// Ensures a shared prefix held by another slot is never evicted with the slot that is overwritten, nor the blocks
// the new prompt itself holds; and a prefix shorter than a tenth of the prompt does not claim a slot.
TEST(PodBlockLedgerSlots, SharedBlocksStay) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3}), 2, evicted);
  ledger.touchSlots(PodId{1}, "m", chain({1, 7, 8}), 2, evicted);  // shares block 1 (a third): reuses slot 0
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hashes, chain({2, 3}));
  evicted.clear();
  ledger.touchSlots(PodId{1}, "m", chain({30}), 2, evicted);  // the empty slot
  EXPECT_TRUE(evicted.empty());
  // 1 of 11 blocks shared (under a tenth): the least recently used slot ({1, 7, 8}) is overwritten, but the new
  // prompt holds block 1 itself.
  ledger.touchSlots(PodId{1}, "m", chain({1, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49}), 2, evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hashes, chain({7, 8}));
  evicted.clear();
  ledger.touchSlots(PodId{2}, "m", chain({5, 6}), 0, evicted);  // slots unknown: nothing modelled
  ledger.touchSlots(PodId{2}, "m", chain({7, 8}), 0, evicted);
  EXPECT_TRUE(evicted.empty());
}

// Ensures a slot busy with a request is not taken by the next request of the same prefix (it takes another slot,
// pushing out what that one held), the prefix a new request would find is what idle slots hold, and a released
// slot is found again.
TEST(PodBlockLedgerSlots, BusySlotsServeNoOne) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  auto idle = [&](std::initializer_list<uint64_t> hashes, std::string_view model = "m") {
    return ledger.slotPrefix(PodId{1}, model, chain(hashes), 2).value().idle;
  };
  auto any = [&](std::initializer_list<uint64_t> hashes) {
    return ledger.slotPrefix(PodId{1}, "m", chain(hashes), 2).value().any;
  };
  uint64_t a = 0, b = 0, again = 0;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3}), 2, evicted, &a);
  EXPECT_EQ(idle({1, 2, 3, 4}), 0u);  // its slot is busy; the other is empty
  EXPECT_EQ(any({1, 2, 3, 4}), 3u);   // but a slot does hold it
  ledger.touchSlots(PodId{1}, "m", chain({7, 8}), 2, evicted, &b);  // the second slot
  EXPECT_NE(a, b);
  // Both busy: a request waits for the first to free, taken to be the one busy the longest (holding its prefix).
  EXPECT_EQ(idle({1, 2, 3, 4}), 3u);
  EXPECT_EQ(idle({7, 8, 9}), 0u);  // {7, 8} is in the slot busy for less long
  ledger.releaseSlot(PodId{1}, b);
  EXPECT_EQ(idle({1, 2, 3, 4}), 0u);  // only {7, 8} is idle
  // The same prefix again while its slot is busy: it takes the idle one, and {7, 8} is gone.
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 5}), 2, evicted, &again);
  EXPECT_EQ(again, b);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].hashes, chain({7, 8}));
  ledger.releaseSlot(PodId{1}, a);
  ledger.releaseSlot(PodId{1}, again);
  EXPECT_EQ(idle({1, 2, 3, 5, 6}), 4u);
  EXPECT_EQ(idle({1, 2, 3}, "other"), 0u);
  EXPECT_FALSE(ledger.slotPrefix(PodId{9}, "m", chain({1, 2, 3}), 2).has_value());  // nothing modelled
  ledger.removePod(PodId{1});
  ledger.releaseSlot(PodId{1}, a);  // a request outliving its pod: ignored
}

// Ensures slot pods touched from every thread at once stay consistent (each pod's slots under its own lock; TSan
// runs this): every pod ends with its slots full and every eviction names blocks it was routed.
TEST(PodBlockLedgerSlots, ConcurrentTouches) {
  PodBlockLedger ledger;
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 4; ++t)
    threads.emplace_back([&ledger, t] {
      std::vector<PodBlockLedger::Evicted> evicted;
      for (uint64_t i = 0; i < 300; ++i) {
        const uint64_t base = (i % 5) * 100;
        ledger.touchSlots(PodId{1 + t % 2}, "m", chain({base, base + 1, base + 2 + i % 3}), 2, evicted);
      }
      for (const auto& group : evicted)
        for (BlockHash h : group.hashes) EXPECT_LT(h.value, 500u);
    });
  for (auto& t : threads) t.join();
}

// Ensures two models never share a slot's prefix, and a smaller slot count (the engine restarted) drops the least
// recently used slots.
TEST(PodBlockLedgerSlots, ModelsApartAndFewerSlots) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  ledger.touchSlots(PodId{1}, "a", chain({1, 2}), 3, evicted);
  ledger.touchSlots(PodId{1}, "b", chain({1, 2}), 3, evicted);  // same hashes, other model: its own slot
  ledger.touchSlots(PodId{1}, "a", chain({9}), 3, evicted);
  EXPECT_TRUE(evicted.empty());
  ledger.touchSlots(PodId{1}, "a", chain({9, 10}), 2, evicted);  // two slots now: a's {1, 2} (oldest) goes
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].model, "a");
  EXPECT_EQ(evicted[0].hashes, chain({1, 2}));
}

// A request's turn in a busy slot, counting how often it came.
struct CountingTurn final : PodBlockLedger::SlotTurn {
  int turns = 0;
  void ready() override { ++turns; }
};

// Ensures a request that may wait takes the busy slot holding its prefix (not the idle one), queued behind the
// request serving there; its turn comes when that one ends, the next queued one's when it ends in turn (first in,
// first out), and a request that gave up waiting (its turn let go) is passed over.
TEST(PodBlockLedgerSlots, AWaitingRequestQueuesForTheBusySlotHoldingItsPrefix) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  auto prefixes = [&](std::initializer_list<uint64_t> hashes) {
    return ledger.slotPrefix(PodId{1}, "m", chain(hashes), 2).value();
  };
  uint64_t serving = 0, first = 0, second = 0, third = 0, other = 0;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3}), 2, evicted, &serving);
  ledger.touchSlots(PodId{1}, "m", chain({7, 8}), 2, evicted, &other);
  ledger.releaseSlot(PodId{1}, other);  // {7, 8} idle, {1, 2, 3} busy
  EXPECT_EQ(prefixes({1, 2, 3, 4}).queued, 3u);
  EXPECT_EQ(prefixes({1, 2, 3, 4}).ahead, 1u);
  EXPECT_EQ(prefixes({7, 8, 9}).queued, 0u);  // its holder is idle: nothing to wait for
  auto a = std::make_shared<CountingTurn>();
  bool queued = false;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4}), 2, evicted, &first, a, &queued);
  EXPECT_TRUE(queued);
  EXPECT_EQ(first, serving);   // the busy slot, not the idle one
  EXPECT_TRUE(evicted.empty());  // {7, 8} stays
  EXPECT_EQ(prefixes({1, 2, 3, 4, 5}).ahead, 2u);
  auto b = std::make_shared<CountingTurn>();
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4, 5}), 2, evicted, &second, b, &queued);
  EXPECT_TRUE(queued);
  auto gone = std::make_shared<CountingTurn>();
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4, 5, 6}), 2, evicted, &third, gone, &queued);
  EXPECT_TRUE(queued);
  gone.reset();  // this one stopped waiting
  auto c = std::make_shared<CountingTurn>();
  uint64_t fourth = 0;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4, 5, 6, 7}), 2, evicted, &fourth, c, &queued);
  EXPECT_EQ(a->turns + b->turns + c->turns, 0);
  ledger.releaseSlot(PodId{1}, serving);
  EXPECT_EQ(a->turns, 1);
  EXPECT_EQ(b->turns, 0);
  ledger.releaseSlot(PodId{1}, first);
  EXPECT_EQ(b->turns, 1);
  EXPECT_EQ(c->turns, 0);
  ledger.releaseSlot(PodId{1}, second);
  ledger.releaseSlot(PodId{1}, third);  // the one that gave up ends (it ran in another slot): c's turn
  EXPECT_EQ(c->turns, 1);
  EXPECT_EQ(a->turns + b->turns, 2);  // once each
}

// Ensures the times of a slot's requests: the one served there is timed from when it took the slot (or got its
// turn), with the time it was expected to take; those waiting are summed when their time is known and counted
// when not, a waiter that gave up among the unknown (its request still holds the slot's count until it ends).
TEST(PodBlockLedgerSlots, ASlotKnowsHowLongItsRequestsTake) {
  testing::ManualClock clock;
  PodBlockLedger ledger(&clock);
  std::vector<PodBlockLedger::Evicted> evicted;
  auto prefixes = [&] { return ledger.slotPrefix(PodId{1}, "m", chain({1, 2, 3, 4}), 2).value(); };
  uint64_t serving = 0, other = 0, first = 0, second = 0, third = 0;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3}), 2, evicted, &serving, nullptr, nullptr, 2.0);
  ledger.touchSlots(PodId{1}, "m", chain({7, 8}), 2, evicted, &other);
  ledger.releaseSlot(PodId{1}, other);
  clock.advance(std::chrono::milliseconds(500));
  PodBlockLedger::SlotPrefixes held = prefixes();
  EXPECT_EQ(held.ahead, 1u);
  EXPECT_DOUBLE_EQ(held.serving_s, 0.5);
  EXPECT_DOUBLE_EQ(held.serving_expected_s, 2.0);
  EXPECT_DOUBLE_EQ(held.waiting_expected_s, 0);
  EXPECT_EQ(held.waiting_unknown, 0u);
  auto a = std::make_shared<CountingTurn>(), b = std::make_shared<CountingTurn>(), c = std::make_shared<CountingTurn>();
  bool queued = false;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4}), 2, evicted, &first, a, &queued, 0.25);
  ASSERT_TRUE(queued);
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4}), 2, evicted, &second, b, &queued);  // its time unknown
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4}), 2, evicted, &third, c, &queued, 0.5);
  held = prefixes();
  EXPECT_EQ(held.ahead, 4u);
  EXPECT_DOUBLE_EQ(held.serving_s, 0.5);  // queueing does not restart the served one's time
  EXPECT_DOUBLE_EQ(held.waiting_expected_s, 0.75);
  EXPECT_EQ(held.waiting_unknown, 1u);
  c.reset();  // gave up: unknown now
  held = prefixes();
  EXPECT_DOUBLE_EQ(held.waiting_expected_s, 0.25);
  EXPECT_EQ(held.waiting_unknown, 2u);
  clock.advance(std::chrono::seconds(1));
  ledger.releaseSlot(PodId{1}, serving);  // a's turn: served from now, for its 0.25 s
  ASSERT_EQ(a->turns, 1);
  held = prefixes();
  EXPECT_EQ(held.ahead, 3u);
  EXPECT_DOUBLE_EQ(held.serving_s, 0);
  EXPECT_DOUBLE_EQ(held.serving_expected_s, 0.25);
  EXPECT_DOUBLE_EQ(held.waiting_expected_s, 0);
  EXPECT_EQ(held.waiting_unknown, 2u);
  clock.advance(std::chrono::milliseconds(100));
  ledger.releaseSlot(PodId{1}, first);  // b's turn: its time unknown
  held = prefixes();
  EXPECT_DOUBLE_EQ(held.serving_expected_s, -1);
  EXPECT_DOUBLE_EQ(held.serving_s, 0);
  clock.advance(std::chrono::milliseconds(300));
  EXPECT_NEAR(prefixes().serving_s, 0.3, 1e-9);
}

// Ensures a request that may wait takes an idle slot as before when no busy slot holds more of it, and that
// without a turn a busy holder is never waited for; a turn still queued when its pod leaves comes at once.
TEST(PodBlockLedgerSlots, NoWaitWithoutABusyHolderOrATurn) {
  PodBlockLedger ledger;
  std::vector<PodBlockLedger::Evicted> evicted;
  uint64_t serving = 0, idle_taken = 0, plain = 0, waiting = 0;
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3}), 2, evicted, &serving);
  auto turn = std::make_shared<CountingTurn>();
  bool queued = true;
  // A prompt the busy slot holds a tenth of or less: the idle (empty) slot.
  ledger.touchSlots(PodId{1}, "m", chain({1, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29}), 2, evicted, &idle_taken, turn,
                    &queued);
  EXPECT_FALSE(queued);
  EXPECT_NE(idle_taken, serving);
  ledger.releaseSlot(PodId{1}, idle_taken);
  // No turn: the idle slot, as the engine would give it.
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4}), 2, evicted, &plain);
  EXPECT_NE(plain, serving);
  ledger.releaseSlot(PodId{1}, plain);
  // The idle slot holds more of it ({1, 2, 3, 4}) than the busy one: nothing to wait for.
  ledger.touchSlots(PodId{1}, "m", chain({1, 2, 3, 4, 5}), 2, evicted, &waiting, turn, &queued);
  EXPECT_FALSE(queued);
  EXPECT_EQ(waiting, plain);
  // Every slot busy, the one to free first holding the prefix: the engine's own queue gives it that slot.
  uint64_t older = 0, newer = 0, next = 0;
  ledger.touchSlots(PodId{2}, "m", chain({1, 2}), 2, evicted, &older);
  ledger.touchSlots(PodId{2}, "m", chain({5, 6}), 2, evicted, &newer);
  ledger.touchSlots(PodId{2}, "m", chain({1, 2, 3}), 2, evicted, &next, turn, &queued);
  EXPECT_FALSE(queued);
  EXPECT_EQ(next, older);
  // Now {5, 6}'s slot frees first (busy the longest) and {1, 2, 3}'s holds the prefix: the request waits for the
  // holder. Its pod then leaves.
  ledger.touchSlots(PodId{2}, "m", chain({1, 2, 3, 4}), 2, evicted, &next, turn, &queued);
  EXPECT_TRUE(queued);
  EXPECT_EQ(next, older);
  EXPECT_EQ(turn->turns, 0);
  ledger.removePod(PodId{2});
  EXPECT_EQ(turn->turns, 1);
}

}  // namespace
}  // namespace prefixgate::index
