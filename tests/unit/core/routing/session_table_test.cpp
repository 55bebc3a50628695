// The session-affinity table (routing/session_table.h): TTL and LRU bounds, what it tells its sink (new pins and
// moves, one refresh per ttl / 4, never another replica's pins), and how other replicas' pins are applied (the
// newer pin wins, so replicas that moved a session at the same time agree). The exchange through Redis is tested
// end to end in tests/integration/test_state_sync.py.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "routing/session_table.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::routing {
namespace {

SessionTable::Settings settings(uint32_t ttl_ms, uint32_t max_sessions) {
  SessionTable::Settings s;
  s.ttl_ms = ttl_ms;
  s.max_sessions = max_sessions;
  return s;
}

class RecordingSink : public SessionSink {
 public:
  struct Call {
    std::string id, pod;
    int64_t pinned_ago_ms;
    bool operator==(const Call&) const = default;
  };
  void sessionPinned(std::string_view id, const discovery::PodState& pod, int64_t pinned_ago_ms) override {
    calls.push_back({std::string(id), pod.name(), pinned_ago_ms});
  }
  std::vector<Call> calls;
};

class SessionTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2)});
    snapshot = pods.snapshot();
  }
  const discovery::PodState& pod(size_t i) const { return *snapshot->pods()[i]; }
  PodId id(size_t i) const { return pod(i).id(); }
  discovery::PodRegistry pods;
  std::shared_ptr<const discovery::PodSet> snapshot;
};

// Ensures a session is forgotten ttl_ms after its last use, and that each use keeps it for another ttl_ms.
TEST_F(SessionTableTest, ForgetsSessionsUnusedForTheTtl) {
  SessionTable table(settings(1000, 10));
  table.remember("s", id(0), nullptr, 0);
  EXPECT_EQ(table.lookup("s", 999), id(0));
  table.remember("s", id(0), nullptr, 900);
  EXPECT_EQ(table.lookup("s", 1899), id(0));
  EXPECT_EQ(table.lookup("s", 1900), std::nullopt);
  EXPECT_EQ(table.size(), 0u);  // the expired entry is gone, not just hidden
}

// Ensures beyond max_sessions the least recently used session (by its last pin, not its last lookup) is forgotten.
TEST_F(SessionTableTest, ForgetsTheLeastRecentlyUsedBeyondItsCap) {
  SessionTable table(settings(60000, 2));
  table.remember("x", id(0), nullptr, 0);
  table.remember("y", id(1), nullptr, 1);
  table.remember("x", id(0), nullptr, 2);  // x used again: y is now the least recent
  table.remember("z", id(1), nullptr, 3);
  EXPECT_EQ(table.size(), 2u);
  EXPECT_EQ(table.lookup("y", 4), std::nullopt);
  EXPECT_EQ(table.lookup("x", 4), id(0));
  EXPECT_EQ(table.lookup("z", 4), id(1));
}

// Ensures the sink hears of a new pin and a move at once, of a pin kept busy once per ttl / 4 (with its age), and of
// nothing else: not a reuse within ttl / 4, not a pin without a pod to name, not another replica's pin.
TEST_F(SessionTableTest, TellsTheSinkOfChangesAndOneRefreshPerQuarterTtl) {
  SessionTable table(settings(1000, 10));
  RecordingSink sink;
  table.setSink(&sink);
  table.remember("s", id(0), &pod(0), 0);      // new
  table.remember("s", id(0), &pod(0), 100);    // reuse: nothing
  table.remember("s", id(0), &pod(0), 249);    // still within 250 ms of the last share
  table.remember("s", id(0), &pod(0), 250);    // refresh, pinned 250 ms ago
  table.remember("s", id(1), &pod(1), 300);    // moved
  table.remember("t", id(0), nullptr, 300);    // no pod to name (a test's candidate): not told
  table.applyRemote("r", {id(1), 300, 300}, 300);  // another replica's: not told back
  table.remember("r", id(1), &pod(1), 400);    // and shared 100 ms ago by the other replica: not yet again
  table.remember("r", id(1), &pod(1), 550);    // 250 ms after the other replica's share: refreshed
  using Call = RecordingSink::Call;
  EXPECT_EQ(sink.calls, (std::vector<Call>{{"s", "a", 0}, {"s", "a", 250}, {"s", "b", 0}, {"r", "b", 250}}));
}

// Ensures another replica's pin is learnt with its TTL running from that replica's use, extends a pin to the same
// pod, replaces a pin to another pod only when it is newer, and is ignored when already expired.
TEST_F(SessionTableTest, AppliesRemotePinsNewestFirst) {
  SessionTable table(settings(1000, 10));
  EXPECT_TRUE(table.applyRemote("s", {id(0), 500, 400}, 600));
  EXPECT_EQ(table.lookup("s", 1499), id(0));
  EXPECT_EQ(table.lookup("s", 1500), std::nullopt);  // 1000 ms after the other replica's use, not after the apply
  EXPECT_FALSE(table.applyRemote("old", {id(0), 100, 100}, 1100));  // expired on arrival
  EXPECT_EQ(table.lookup("old", 1100), std::nullopt);

  table.remember("m", id(0), nullptr, 2000);
  EXPECT_FALSE(table.applyRemote("m", {id(1), 2100, 1999}, 2100));  // pinned to b before this table's pin to a
  EXPECT_EQ(table.lookup("m", 2100), id(0));
  EXPECT_TRUE(table.applyRemote("m", {id(0), 2800, 1500}, 2800));    // same pod, later use: TTL extended
  EXPECT_EQ(table.lookup("m", 3700), id(0));
  EXPECT_TRUE(table.applyRemote("m", {id(1), 3710, 3710}, 3710));    // moved after this table's pin: followed
  EXPECT_EQ(table.lookup("m", 3710), id(1));
}

// Ensures two replicas that move one session to different pods at nearly the same time, each applying the other's
// pin afterwards (as the stream delivers it), end with the same pod: the later move.
TEST_F(SessionTableTest, ReplicasMovingASessionAtOnceAgreeOnTheLaterMove) {
  SessionTable a(settings(60000, 10)), b(settings(60000, 10));
  RecordingSink from_a, from_b;
  a.setSink(&from_a);
  b.setSink(&from_b);
  a.remember("s", id(0), &pod(0), 0);
  b.applyRemote("s", {id(0), 0, 0}, 1);
  a.remember("s", id(1), &pod(1), 1000);  // A moves it to b...
  b.remember("s", id(0), &pod(0), 1001);  // ...while B, not knowing yet, keeps it on a (no change: nothing sent)
  a.remember("s", id(0), &pod(0), 1002);  // then A moves it back to a
  EXPECT_TRUE(from_b.calls.empty());
  ASSERT_EQ(from_a.calls.size(), 3u);
  b.applyRemote("s", {id(1), 1000, 1000}, 1003);
  b.applyRemote("s", {id(0), 1002, 1002}, 1003);
  EXPECT_EQ(a.lookup("s", 1003), id(0));
  EXPECT_EQ(b.lookup("s", 1003), id(0));
  // Delivered the other way round, B still ends on A's last move (the older move is refused).
  SessionTable c(settings(60000, 10));
  c.applyRemote("s", {id(0), 1002, 1002}, 1003);
  EXPECT_FALSE(c.applyRemote("s", {id(1), 1000, 1000}, 1003));
  EXPECT_EQ(c.lookup("s", 1003), id(0));
}

}  // namespace
}  // namespace prefixgate::routing
