// One pod's KV event message order: in-order messages applied, gaps replayed, late joins fetching history,
// publisher restarts and failed replays forgetting the pod's blocks.
#include "engine/kv_event_stream.h"

#include <gtest/gtest.h>

namespace prefixgate::engine {
namespace {

constexpr int64_t kTimeout = 2000;
const std::vector<uint8_t> kPayload = {1, 2, 3};

// Ensures messages numbered 0, 1, 2 are applied as they come, with nothing else asked.
TEST(KvEventStream, InOrderMessagesAreApplied) {
  KvEventStream stream(true, 100, kTimeout);
  for (int64_t seq = 0; seq < 3; ++seq) {
    auto action = stream.live(seq, 0);
    EXPECT_TRUE(action.apply && !action.reset && !action.hold && !action.replay_from) << seq;
  }
  EXPECT_EQ(stream.expected(), 3);
  EXPECT_EQ(stream.counters().gaps, 0u);
}

// Ensures a gap asks for a replay from the first missing message, holds live messages meanwhile, applies the
// replayed ones, then the held ones not replayed, in order.
TEST(KvEventStream, GapIsReplayedThenHeldMessagesFollow) {
  KvEventStream stream(true, 100, kTimeout);
  stream.live(0, 0);
  stream.live(1, 0);
  auto gap = stream.live(4, 10);
  EXPECT_TRUE(gap.hold && !gap.apply && !gap.reset);
  ASSERT_TRUE(gap.replay_from);
  EXPECT_EQ(*gap.replay_from, 2);
  stream.hold(4, kPayload);
  EXPECT_TRUE(stream.live(5, 20).hold);
  stream.hold(5, kPayload);
  for (int64_t seq : {2, 3, 4}) EXPECT_TRUE(stream.replayed(seq).apply) << seq;  // the replay reaches the newest
  auto drain = stream.replayEnded(true);
  EXPECT_FALSE(drain.reset);
  ASSERT_EQ(drain.messages.size(), 1u);  // 4 came through the replay already; only 5 is new
  EXPECT_EQ(drain.messages[0].first, 5);
  EXPECT_EQ(stream.expected(), 6);
  EXPECT_EQ(stream.counters().gaps, 1u);
  EXPECT_EQ(stream.counters().resets, 0u);
  EXPECT_TRUE(stream.live(6, 30).apply);
}

// Ensures a replay whose first message is past the missing ones (the publisher's buffer moved on) forgets the
// pod's blocks once and rebuilds from what it gets.
TEST(KvEventStream, ReplayThatCannotReachBackResets) {
  KvEventStream stream(true, 100, kTimeout);
  stream.live(0, 0);
  stream.live(50, 0);
  stream.hold(50, kPayload);
  auto first = stream.replayed(40);
  EXPECT_TRUE(first.reset && first.apply);
  auto next = stream.replayed(41);
  EXPECT_TRUE(next.apply && !next.reset);
  EXPECT_EQ(stream.counters().replay_failures, 1u);
}

// Ensures a replay that times out forgets the pod's blocks and applies every held message.
TEST(KvEventStream, TimedOutReplayResetsAndAppliesHeld) {
  KvEventStream stream(true, 100, kTimeout);
  stream.live(0, 0);
  stream.live(3, 100);
  stream.hold(3, kPayload);
  EXPECT_FALSE(stream.replayTimedOut(100 + kTimeout - 1));
  EXPECT_TRUE(stream.replayTimedOut(100 + kTimeout));
  auto drain = stream.replayEnded(false);
  EXPECT_TRUE(drain.reset);
  ASSERT_EQ(drain.messages.size(), 1u);
  EXPECT_EQ(stream.expected(), 4);
}

// Ensures that without a replay socket a gap forgets the pod's blocks and goes on from the new message.
TEST(KvEventStream, GapWithoutReplayResets) {
  KvEventStream stream(false, 100, kTimeout);
  stream.live(0, 0);
  auto gap = stream.live(7, 0);
  EXPECT_TRUE(gap.reset && gap.apply && !gap.replay_from);
  EXPECT_EQ(stream.expected(), 8);
}

// Ensures a number going back (a publisher restart) forgets the pod's blocks, and fetches what the restarted
// publisher sent before it when there is a replay socket.
TEST(KvEventStream, RestartForgetsAndReplaysFromZero) {
  KvEventStream stream(true, 100, kTimeout);
  for (int64_t seq = 0; seq < 10; ++seq) stream.live(seq, 0);
  auto restart = stream.live(2, 0);
  EXPECT_TRUE(restart.reset && restart.hold);
  ASSERT_TRUE(restart.replay_from);
  EXPECT_EQ(*restart.replay_from, 0);
  EXPECT_EQ(stream.counters().restarts, 1u);
  KvEventStream plain(false, 100, kTimeout);
  plain.live(0, 0);
  plain.live(1, 0);
  auto back = plain.live(0, 0);
  EXPECT_TRUE(back.reset && back.apply);
}

// Ensures a subscription that starts mid-stream fetches the history from 0 through replay, and without replay
// goes on with a partial view (counted).
TEST(KvEventStream, LateJoinFetchesHistory) {
  KvEventStream stream(true, 100, kTimeout);
  auto join = stream.live(25, 0);
  ASSERT_TRUE(join.replay_from);
  EXPECT_EQ(*join.replay_from, 0);
  EXPECT_FALSE(join.reset);
  KvEventStream partial(false, 100, kTimeout);
  EXPECT_TRUE(partial.live(25, 0).apply);
  EXPECT_EQ(partial.counters().late_joins, 1u);
}

// Ensures a new subscription with a replay socket asks for the whole history at once, applies it, and then goes on
// with live messages; without a replay socket it asks nothing.
TEST(KvEventStream, SubscribingFetchesHistoryAtOnce) {
  KvEventStream stream(true, 100, kTimeout);
  auto join = stream.subscribed(0);
  ASSERT_TRUE(join.replay_from);
  EXPECT_EQ(*join.replay_from, 0);
  EXPECT_FALSE(join.hold || join.apply || join.reset);
  EXPECT_TRUE(stream.live(7, 1).hold);  // live messages wait for the history
  stream.hold(7, kPayload);
  for (int64_t seq = 0; seq < 7; ++seq) EXPECT_TRUE(stream.replayed(seq).apply);
  auto drain = stream.replayEnded(true);
  EXPECT_FALSE(drain.reset);
  ASSERT_EQ(drain.messages.size(), 1u);
  EXPECT_EQ(stream.expected(), 8);
  KvEventStream plain(false, 100, kTimeout);
  EXPECT_FALSE(plain.subscribed(0).replay_from);
}

// Ensures more held messages than the bound drops the oldest and resets when the replay ends.
TEST(KvEventStream, HeldOverflowResets) {
  KvEventStream stream(true, 2, kTimeout);
  stream.live(0, 0);
  stream.live(5, 0);
  for (int64_t seq : {5, 6, 7}) stream.hold(seq, kPayload);
  auto drain = stream.replayEnded(true);
  EXPECT_TRUE(drain.reset);
  ASSERT_EQ(drain.messages.size(), 2u);
  EXPECT_EQ(drain.messages[0].first, 6);
}

// Ensures live messages held while a replay runs stay within their byte bound: the oldest make room, a message
// larger than the bound is not held, every drop is counted, and a replay that lost held messages forgets the pod.
TEST(KvEventStream, HeldMessagesAreBoundedInBytes) {
  KvEventStream stream(true, 10000, kTimeout, 100);
  stream.live(0, 0);
  ASSERT_TRUE(stream.live(5, 0).hold);
  const std::vector<uint8_t> payload(30, 7);
  for (int64_t seq = 5; seq < 15; ++seq) {
    stream.hold(seq, payload);
    EXPECT_LE(stream.heldBytes(), 100u) << seq;
  }
  EXPECT_EQ(stream.heldBytes(), 90u);
  EXPECT_EQ(stream.counters().held_dropped, 7u);
  stream.hold(15, std::vector<uint8_t>(101, 1));  // larger than the bound: not held at all
  EXPECT_EQ(stream.heldBytes(), 90u);
  EXPECT_EQ(stream.counters().held_dropped, 8u);
  for (int64_t seq = 1; seq < 5; ++seq) stream.replayed(seq);
  auto drain = stream.replayEnded(true);
  EXPECT_TRUE(drain.reset);
  ASSERT_EQ(drain.messages.size(), 3u);
  EXPECT_EQ(drain.messages.front().first, 12);
  EXPECT_EQ(stream.heldBytes(), 0u);
}

}  // namespace
}  // namespace prefixgate::engine
