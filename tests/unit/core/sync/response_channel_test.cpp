// State sync's responses channel (Responses API chain affinity shared between replicas) without Redis: the wire form
// of response ids, the outbox, the snapshot's commands, and what applying another replica's batch does to this
// replica's ResponseAffinity. The exchange runs end to end in tests/integration/test_state_sync.py.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <string>
#include <utility>
#include <vector>

#include "routing/response_affinity.h"
#include "sync/outbox.h"
#include "sync/record_batch.h"
#include "sync/response_channel.h"
#include "sync/snapshot_channel.h"
#include "unit/core/pod_specs.h"
#include "unit/core/sync/redis_commands.h"

namespace prefixgate::sync {
namespace {

using test_support::bulk;
using test_support::Args;
using test_support::parse;

std::string twoResponseBatch() {
  std::string body;
  appendResponse(body, {1764633600500, true, "resp_abc123", "10.0.0.1:8000"});
  appendResponse(body, {1764633600600, false, std::string(256, 'r'), "[::1]:9"});
  return makeResponseBatch(body, 2);
}

// Ensures response entries round-trip through a batch with their time, op, id and pod.
TEST(ResponseBatch, RoundTrips) {
  const std::string batch = twoResponseBatch();
  ResponseBatchReader reader(batch);
  ResponseEntry e;
  ASSERT_TRUE(reader.next(e)) << reader.error();
  EXPECT_EQ(e.wall_ms, 1764633600500);
  EXPECT_TRUE(e.remembered);
  EXPECT_EQ(e.id, "resp_abc123");
  EXPECT_EQ(e.pod, "10.0.0.1:8000");
  ASSERT_TRUE(reader.next(e)) << reader.error();
  EXPECT_FALSE(e.remembered);
  EXPECT_EQ(e.id, std::string(256, 'r'));
  EXPECT_EQ(e.pod, "[::1]:9");
  EXPECT_FALSE(reader.next(e));
  EXPECT_TRUE(reader.error().empty()) << reader.error();
}

// Ensures a batch cut anywhere is an error, never an entry read past its end.
TEST(ResponseBatch, EveryTruncationIsAnError) {
  const std::string batch = twoResponseBatch();
  for (size_t n = 0; n < batch.size(); ++n) {
    ResponseBatchReader reader(std::string_view(batch).substr(0, n));
    ResponseEntry e;
    while (reader.next(e)) {
    }
    EXPECT_FALSE(reader.error().empty()) << n;
  }
}

// Ensures what no replica writes is refused: an id that is no response id (too long, odd bytes, empty), a pod
// address empty or over its bound, an unknown op, trailing bytes, another kind of batch.
TEST(ResponseBatch, RefusesMalformedEntries) {
  const auto refused = [](const ResponseEntry& entry) {
    std::string body;
    appendResponse(body, entry);
    const std::string batch = makeResponseBatch(body, 1);
    ResponseBatchReader reader(batch);
    ResponseEntry e;
    return !reader.next(e) && !reader.error().empty();
  };
  EXPECT_TRUE(refused({1, true, std::string(257, 'r'), "p:1"}));
  EXPECT_TRUE(refused({1, true, "resp/../x", "p:1"}));
  EXPECT_TRUE(refused({1, true, "", "p:1"}));
  EXPECT_TRUE(refused({1, true, "resp_a", ""}));
  EXPECT_TRUE(refused({1, true, "resp_a", std::string(kMaxPodAddressBytes + 1, 'p')}));
  EXPECT_FALSE(refused({1, true, "resp_a", std::string(kMaxPodAddressBytes, 'p')}));
  std::string body;
  appendResponse(body, {1, true, "resp_a", "p:1"});
  body[1] = '\x02';  // the op byte
  const std::string bad_op_batch = makeResponseBatch(body, 1);
  ResponseBatchReader bad_op(bad_op_batch);
  ResponseEntry e;
  EXPECT_FALSE(bad_op.next(e));
  EXPECT_NE(bad_op.error().find("op"), std::string::npos) << bad_op.error();
  const std::string trailing = twoResponseBatch() + "x";
  ResponseBatchReader extra(trailing);
  while (extra.next(e)) {
  }
  EXPECT_FALSE(extra.error().empty());
  const std::string session_batch = makeSessionBatch("", 0);
  ResponseBatchReader sessions(session_batch);
  EXPECT_FALSE(sessions.next(e));
  EXPECT_FALSE(sessions.error().empty());
}

// Ensures a snapshot member is the id and the pod (no time, no op) and its decoding checks what a batch's does.
TEST(ResponseBatch, KeysAreTheIdAndThePod) {
  const std::string key = encodeResponseKey({900, true, "resp_a", "p:1"});
  EXPECT_EQ(key, encodeResponseKey({950, false, "resp_a", "p:1"}));
  EXPECT_NE(key, encodeResponseKey({900, true, "resp_a", "p:2"}));
  ResponseEntry e;
  std::string error;
  ASSERT_TRUE(decodeResponseKey(key, e, error)) << error;
  EXPECT_EQ(e.id, "resp_a");
  EXPECT_EQ(e.pod, "p:1");
  EXPECT_TRUE(e.remembered);
  EXPECT_FALSE(decodeResponseKey(key + "z", e, error));
  for (size_t n = 0; n < key.size(); ++n) EXPECT_FALSE(decodeResponseKey(key.substr(0, n), e, error)) << n;
  EXPECT_FALSE(decodeResponseKey(encodeResponseKey({1, true, "resp a", "p:1"}), e, error));
}

// Ensures response ids share the outbox's byte bound with the other kinds and are put back oldest first.
TEST(ResponseOutbox, QueuesResponsesUnderTheSameBound) {
  std::string one;
  appendResponse(one, {100, true, "resp_1", "p:1"});
  Outbox box(2 * one.size(), 1 << 20, 64);
  ASSERT_EQ(box.addResponse(0, {100, true, "resp_1", "p:1"}), Outbox::Added::kQueued);
  ASSERT_EQ(box.addResponse(0, {101, false, "resp_2", "p:1"}), Outbox::Added::kQueued);
  EXPECT_EQ(box.addResponse(0, {102, true, "resp_3", "p:1"}), Outbox::Added::kFull);
  Outbox::Taken taken = box.take();
  EXPECT_EQ(taken.response_count, 2u);
  EXPECT_FALSE(taken.empty());
  ASSERT_EQ(box.addResponse(0, {103, true, "resp_4", "p:1"}), Outbox::Added::kQueued);
  EXPECT_EQ(box.putBack(std::move(taken)).responses, 1u);  // room for one beside resp_4: the oldest
  taken = box.take();
  std::vector<std::string> ids;
  std::string_view in = taken.responses;
  ResponseEntry e;
  std::string error;
  while (!in.empty() && readResponse(in, e, error)) ids.emplace_back(e.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"resp_1", "resp_4"}));
}

class RecordingSink : public routing::ResponseSink {
 public:
  void responseRemembered(std::string_view id, std::string_view pod) override {
    calls.push_back("+" + std::string(id) + "@" + std::string(pod));
  }
  void responseForgotten(std::string_view id, std::string_view pod) override {
    calls.push_back("-" + std::string(id) + "@" + std::string(pod));
  }
  std::vector<std::string> calls;
};

struct Replica {
  Replica() {
    pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2)});
    affinity.setSink(&sink);
  }
  std::string address(size_t i) { return pods.snapshot()->pods()[i]->spec().address; }

  int64_t now = 1000000;  // the map's steady clock
  routing::ResponseAffinity affinity{3, 60000, [this] { return now; }};
  RecordingSink sink;
  prometheus::Registry registry;
  StateSyncMetrics metrics{registry};
  discovery::PodRegistry pods;
  PodLookup lookup{pods};
  log::Throttle throttle;
  ResponseChannel channel{affinity, lookup, metrics, throttle};
};

// Ensures another replica's remembers reach this replica's map under the local pod name (it names pods by address),
// its forgets drop the id, and neither goes back out through the sink (no echo); this replica's own do.
TEST(ResponseChannel, AppliesAnotherReplicasIdsWithoutEchoingThem) {
  Replica r;
  const int64_t wall = 1764633600000;
  std::string body;
  appendResponse(body, {wall, true, "resp_a", r.address(0)});
  appendResponse(body, {wall, true, "resp_b", r.address(1)});
  appendResponse(body, {wall, false, "resp_b", r.address(1)});
  r.channel.applyBatch(makeResponseBatch(body, 3), wall);
  EXPECT_EQ(r.affinity.podOf("resp_a").value_or(""), "a");
  EXPECT_FALSE(r.affinity.podOf("resp_b"));
  EXPECT_EQ(r.metrics.responses_received.Value(), 3);
  EXPECT_TRUE(r.sink.calls.empty());
  r.affinity.remember("resp_c", "b");
  r.affinity.forget("resp_c");
  r.affinity.forget("resp_never");  // not remembered: nothing to share
  EXPECT_EQ(r.sink.calls, (std::vector<std::string>{"+resp_c@b", "-resp_c@b"}));
}

// Ensures an id on a pod this replica does not route to is counted unknown_pod and not remembered, and a malformed
// batch is counted once, the entries before the fault staying applied.
TEST(ResponseChannel, CountsUnknownPodsAndMalformedBatches) {
  Replica r;
  std::string body;
  appendResponse(body, {5, true, "resp_elsewhere", "10.9.9.9:1"});
  r.channel.applyBatch(makeResponseBatch(body, 1), 5);
  EXPECT_FALSE(r.affinity.podOf("resp_elsewhere"));
  EXPECT_EQ(r.metrics.responses_unknown_pod.Value(), 1);
  body.clear();
  appendResponse(body, {5, true, "resp_first", r.address(0)});
  r.channel.applyBatch(makeResponseBatch(body, 2), 5);  // claims two, holds one
  r.channel.applyBatch("PR\x01\x01\x05\x01", 5);        // an entry cut short
  r.channel.applyBatch("not a batch", 5);
  EXPECT_EQ(r.affinity.podOf("resp_first").value_or(""), "a");
  EXPECT_EQ(r.metrics.responses_malformed.Value(), 3);
  EXPECT_EQ(r.metrics.responses_received.Value(), 1);
}

// Ensures a remote id's wall-clock time becomes an age on this replica's steady clock: it expires ttl_ms after it
// was produced there (not after it arrived here), and one already older than the TTL is not remembered.
TEST(ResponseChannel, MapsWallClockAgesOntoTheLocalClock) {
  Replica r;
  const int64_t wall = 1764633600000;
  std::string body;
  appendResponse(body, {wall - 50000, true, "resp_old", r.address(0)});    // 50 s old of a 60 s TTL
  appendResponse(body, {wall - 50000, true, "resp_old2", r.address(0)});
  appendResponse(body, {wall - 60000, true, "resp_stale", r.address(0)});  // expired already
  appendResponse(body, {wall + 5000, true, "resp_ahead", r.address(1)});   // a clock ahead: counts as new
  r.channel.applyBatch(makeResponseBatch(body, 4), wall);
  EXPECT_EQ(r.affinity.size(), 3u);
  EXPECT_EQ(r.metrics.responses_received.Value(), 3);
  r.now += 9999;
  EXPECT_TRUE(r.affinity.podOf("resp_old2"));  // (refreshed by the use)
  r.now += 1;  // 10 s here: resp_old's 60 s are over
  EXPECT_FALSE(r.affinity.podOf("resp_old"));
  EXPECT_EQ(r.affinity.podOf("resp_ahead").value_or(""), "b");
}

// Ensures remote ids are bounded by routing.response_affinity.max_entries like local ones (least recently used go).
TEST(ResponseChannel, RemoteIdsAreBoundedByMaxEntries) {
  Replica r;  // max_entries 3
  std::string body;
  for (int i = 0; i < 100; ++i) appendResponse(body, {5, true, "resp_" + std::to_string(i), r.address(0)});
  r.channel.applyBatch(makeResponseBatch(body, 100), 5);
  EXPECT_EQ(r.affinity.size(), 3u);
  EXPECT_TRUE(r.affinity.podOf("resp_99"));
  EXPECT_FALSE(r.affinity.podOf("resp_0"));
}

// Ensures the responses snapshot learns remembered ids at their time (at most max_entries) and loses the deleted
// ones (ZREM), its update trimmed to the TTL and max_entries, and a loaded snapshot is applied oldest first with a
// member it cannot read counted as malformed.
TEST(ResponseChannel, SnapshotAddsTrimsForgetsAndLoads) {
  Replica r;
  config::StateSyncConfig config;
  SyncKeys keys{"pg"};
  SnapshotChannel snapshots(config, std::chrono::milliseconds(60000), keys, nullptr, nullptr, r.metrics, &r.channel);
  Outbox::Taken batch;
  appendResponse(batch.responses, {300, true, "resp_a", "127.0.0.1:1"});
  appendResponse(batch.responses, {310, true, "resp_gone", "127.0.0.1:2"});
  appendResponse(batch.responses, {320, false, "resp_gone", "127.0.0.1:2"});
  batch.response_count = 3;
  snapshots.learn(batch);
  ASSERT_TRUE(snapshots.hasPending());
  std::string commands;
  EXPECT_EQ(snapshots.appendUpdate(commands, 100000), 4u);
  const std::vector<Args> update = parse(commands);
  ASSERT_EQ(update.size(), 4u);
  EXPECT_EQ(update[0], (Args{"ZADD", "pg:responses", "300", encodeResponseKey({0, true, "resp_a", "127.0.0.1:1"})}));
  EXPECT_EQ(update[1], (Args{"ZREMRANGEBYSCORE", "pg:responses", "-inf", "(40000"}));
  EXPECT_EQ(update[2], (Args{"ZREMRANGEBYRANK", "pg:responses", "0", "-4"}));
  EXPECT_EQ(update[3], (Args{"ZREM", "pg:responses", encodeResponseKey({0, true, "resp_gone", "127.0.0.1:2"})}));

  commands.clear();
  EXPECT_EQ(snapshots.appendRead(commands, 100000), 1u);
  EXPECT_EQ(parse(commands)[0], (Args{"ZREVRANGEBYSCORE", "pg:responses", "+inf", "(40000", "WITHSCORES", "LIMIT",
                                      "0", "3"}));
  // Newest first, as Redis answers; with a full map of three, the oldest of four is the one dropped.
  RedisReply reply;
  reply.type = RedisReply::Type::kArray;
  const int64_t wall = 1764633600000;
  for (int i = 4; i >= 1; --i) {
    reply.elements.push_back(bulk(encodeResponseKey({0, true, "resp_" + std::to_string(i), r.address(i % 2)})));
    reply.elements.push_back(bulk(std::to_string(wall - 1000 * (5 - i))));
  }
  reply.elements.push_back(bulk("junk"));
  reply.elements.push_back(bulk("1"));
  reply.elements.insert(reply.elements.begin(), {bulk("also junk"), bulk("2")});
  const std::vector<RedisReply> replies = {reply};
  const SnapshotChannel::Loaded loaded = snapshots.apply(replies, wall);
  EXPECT_EQ(loaded.responses, 4u);
  EXPECT_EQ(r.metrics.responses_malformed.Value(), 2);
  EXPECT_EQ(r.affinity.size(), 3u);
  EXPECT_FALSE(r.affinity.podOf("resp_1"));
  EXPECT_EQ(r.affinity.podOf("resp_4").value_or(""), "a");
  EXPECT_EQ(r.affinity.podOf("resp_3").value_or(""), "b");
}

}  // namespace
}  // namespace prefixgate::sync
