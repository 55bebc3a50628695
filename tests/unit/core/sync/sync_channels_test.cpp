// State sync's channels without Redis: the commands the load and snapshot channels build and what the load channel
// makes of the replies. The exchange itself runs end to end in tests/integration/test_state_sync.py.
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <string>
#include <utility>
#include <vector>

#include "routing/prefix/prefix_services.h"
#include "sync/load_channel.h"
#include "sync/record_channel.h"
#include "sync/snapshot_channel.h"
#include "unit/core/pod_specs.h"
#include "unit/core/sync/redis_commands.h"

namespace prefixgate::sync {
namespace {

using test_support::bulk;
using test_support::Args;
using test_support::parse;

RedisReply array(std::vector<RedisReply> elements) {
  RedisReply r;
  r.type = RedisReply::Type::kArray;
  r.elements = std::move(elements);
  return r;
}

struct Channels {
  Channels() { pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2)}); }
  const discovery::PodState& pod(size_t i) { return *pods.snapshot()->pods()[i]; }

  config::StateSyncConfig config;  // replica_ttl_ms 1500, snapshot_interval_ms 500
  SyncKeys keys{"pg"};
  prometheus::Registry registry;
  StateSyncMetrics metrics{registry};
  discovery::PodRegistry pods;
  PodLookup lookup{pods};
  LoadChannel loads{config, keys, "me", pods, lookup, metrics};
};

// Ensures the heartbeat is SET (expiring with replica_ttl_ms), SADD and SMEMBERS, and the others (not this replica)
// are read with one MGET of their load keys.
TEST(LoadChannel, PublishesItsHeartbeatAndReadsTheOthers) {
  Channels c;
  std::string commands;
  c.loads.appendPublish(commands);
  const std::vector<Args> publish = parse(commands);
  ASSERT_EQ(publish.size(), LoadChannel::kPublishCommands);
  ASSERT_EQ(publish[0].size(), 5u);
  EXPECT_EQ(publish[0][0], "SET");
  EXPECT_EQ(publish[0][1], "pg:load:me");
  EXPECT_EQ((Args{publish[0][3], publish[0][4]}), (Args{"PX", "1500"}));
  EXPECT_EQ(publish[1], (Args{"SADD", "pg:replicas", "me"}));
  EXPECT_EQ(publish[2], (Args{"SMEMBERS", "pg:replicas"}));

  const std::vector<std::string> others = c.loads.others(array({bulk("r1"), bulk("me"), bulk("r2")}));
  EXPECT_EQ(others, (std::vector<std::string>{"r1", "r2"}));
  commands.clear();
  c.loads.appendRead(commands, others);
  EXPECT_EQ(parse(commands), (std::vector<Args>{{"MGET", "pg:load:r1", "pg:load:r2"}}));
}

// Ensures a pod's remote count is the sum over the live replicas, counts for pods this replica does not route to
// are dropped, and a replica whose heartbeat expired is forgotten (SREM) rather than counted.
TEST(LoadChannel, SumsTheLiveReplicasOnKnownPodsOnly) {
  Channels c;
  const std::vector<std::string> others = {"r1", "r2", "r3"};
  LoadChannel::Read read = c.loads.decode(
      others, array({bulk("127.0.0.1:1 3\n10.9.9.9:80 7\n"), RedisReply{}, bulk("127.0.0.1:1 2\n127.0.0.1:2 1\n")}));
  EXPECT_EQ(read.live, (std::vector<std::string>{"r1", "r3"}));
  EXPECT_EQ(read.gone, (std::vector<std::string>{"r2"}));
  EXPECT_FALSE(read.by_pod.contains("10.9.9.9:80"));
  std::string commands;
  c.loads.appendForget(commands, read.gone);
  EXPECT_EQ(parse(commands), (std::vector<Args>{{"SREM", "pg:replicas", "r2"}}));

  c.loads.apply(std::move(read), 1000);
  EXPECT_EQ(c.pod(0).signals().remoteInFlight(), 5);
  EXPECT_EQ(c.pod(1).signals().remoteInFlight(), 1);
  EXPECT_EQ(c.loads.liveReplicas(), (std::vector<std::string>{"r1", "r3"}));
  using Loads = std::vector<std::pair<std::string, int32_t>>;
  EXPECT_EQ(c.loads.replicaLoads("127.0.0.1:1"), (Loads{{"r1", 3}, {"r3", 2}}));
  EXPECT_TRUE(c.loads.replicaLoads("10.9.9.9:80").empty());
}

// Ensures the others' counts are dropped once no read came for longer than replica_ttl_ms, and not before.
TEST(LoadChannel, ForgetsTheOthersWhenNoReadCameWithinTheReplicaTtl) {
  Channels c;
  c.loads.apply(c.loads.decode({"r1"}, array({bulk("127.0.0.1:1 4\n")})), 1000);
  c.loads.expireIfStale(1000 + 1500);
  EXPECT_EQ(c.pod(0).signals().remoteInFlight(), 4);
  c.loads.expireIfStale(1000 + 1501);
  EXPECT_EQ(c.pod(0).signals().remoteInFlight(), 0);
  EXPECT_TRUE(c.loads.liveReplicas().empty());
  EXPECT_TRUE(c.loads.replicaLoads("127.0.0.1:1").empty());
}

// Ensures the snapshot learns each record once at its newest time, at most snapshot_max_records of them, and its
// update is one ZADD followed by the trims to the index expiry and to snapshot_max_records.
TEST(SnapshotChannel, AddsTheNewestTimeOfWhatWasSentThenTrims) {
  Channels c;
  c.config.snapshot_max_records = 2;
  SnapshotChannel snapshots(c.config, std::chrono::milliseconds(60000), c.keys, nullptr, nullptr, c.metrics);
  const std::vector<BlockHash> hashes = {BlockHash{1}, BlockHash{2}};
  Outbox::Taken batch;
  appendRecord(batch.records, 300, "m", "127.0.0.1:1", hashes);
  appendRecord(batch.records, 100, "m", "127.0.0.1:1", hashes);  // the same member, older
  appendRecord(batch.records, 200, "m", "127.0.0.1:2", hashes);
  appendRecord(batch.records, 400, "m", "127.0.0.1:3", hashes);  // beyond snapshot_max_records
  batch.count = 4;
  snapshots.learn(batch);
  ASSERT_TRUE(snapshots.hasPending());

  std::string commands;
  EXPECT_EQ(snapshots.appendUpdate(commands, 100000), 3u);
  const std::vector<Args> update = parse(commands);
  ASSERT_EQ(update.size(), 3u);
  EXPECT_EQ(update[0], (Args{"ZADD", "pg:snapshot", "300", encodeKey("m", "127.0.0.1:1", hashes), "200",
                             encodeKey("m", "127.0.0.1:2", hashes)}));
  EXPECT_EQ(update[1], (Args{"ZREMRANGEBYSCORE", "pg:snapshot", "-inf", "(40000"}));
  EXPECT_EQ(update[2], (Args{"ZREMRANGEBYRANK", "pg:snapshot", "0", "-3"}));

  snapshots.clearPending();
  EXPECT_FALSE(snapshots.hasPending());
  commands.clear();
  EXPECT_EQ(snapshots.appendUpdate(commands, 100000), 0u);
  EXPECT_TRUE(commands.empty());
}

// Ensures a withdrawn record leaves the snapshot (ZREM of its member, also when it was learned in the same interval)
// and the prefix the pod still holds goes in instead; a record learned again later is no longer removed.
TEST(SnapshotChannel, WithdrawnRecordsLeaveTheSnapshot) {
  Channels c;
  SnapshotChannel snapshots(c.config, std::chrono::milliseconds(60000), c.keys, nullptr, nullptr, c.metrics);
  const std::vector<BlockHash> hashes = {BlockHash{1}, BlockHash{2}, BlockHash{3}};
  Outbox::Taken batch;
  appendRecord(batch.records, 300, "m", "127.0.0.1:1", hashes);
  batch.count = 1;
  appendWithdrawal(batch.withdrawals, 310, 1, "m", "127.0.0.1:1", hashes);
  appendWithdrawal(batch.withdrawals, 320, 0, "m", "127.0.0.1:2", hashes);
  batch.withdrawal_count = 2;
  snapshots.learn(batch);
  std::string commands;
  EXPECT_EQ(snapshots.appendUpdate(commands, 100000), 4u);
  const std::vector<Args> update = parse(commands);
  ASSERT_EQ(update.size(), 4u);
  EXPECT_EQ(update[0], (Args{"ZADD", "pg:snapshot", "310", encodeKey("m", "127.0.0.1:1", {hashes.data(), 1})}));
  const std::string one = encodeKey("m", "127.0.0.1:1", hashes);
  const std::string two = encodeKey("m", "127.0.0.1:2", hashes);
  EXPECT_EQ(update[3], (Args{"ZREM", "pg:snapshot", std::min(one, two), std::max(one, two)}));

  // The same record routed (and computed) again before the update went out: it goes back in, not out.
  Outbox::Taken again;
  appendRecord(again.records, 400, "m", "127.0.0.1:1", hashes);
  again.count = 1;
  snapshots.learn(again);
  commands.clear();
  EXPECT_EQ(snapshots.appendUpdate(commands, 100000), 4u);
  const std::vector<Args> after = parse(commands);
  const std::string kept = encodeKey("m", "127.0.0.1:1", {hashes.data(), 1});
  EXPECT_EQ(after[0], (Args{"ZADD", "pg:snapshot", "310", kept, "400", one}));  // members in byte order
  EXPECT_EQ(after[3], (Args{"ZREM", "pg:snapshot", two}));
}

// Ensures another replica's withdrawal takes the blocks past its keep out of this replica's index for that pod, and
// that one naming a pod or model this replica does not route, or a malformed batch, is counted and changes nothing.
TEST(RecordChannel, AppliesAnotherReplicasWithdrawals) {
  Channels c;
  index::PrefixIndexOptions options;
  options.block_capacity = 1000;
  routing::PrefixServices prefix(std::make_unique<tokenize::CharacterTokenizer>(), 4, 0, options);
  log::Throttle throttle;
  RecordChannel records(prefix, c.lookup, c.metrics, throttle);
  const std::vector<BlockHash> hashes = {BlockHash{1}, BlockHash{2}, BlockHash{3}};
  std::string body;
  appendRecord(body, 1, "m", c.pod(0).spec().address, hashes);
  appendRecord(body, 1, "m", c.pod(1).spec().address, hashes);
  records.applyBatch(makeBatch(body, 2), 2);
  body.clear();
  appendWithdrawal(body, 3, 1, "m", c.pod(0).spec().address, hashes);
  appendWithdrawal(body, 3, 0, "other-model", c.pod(1).spec().address, hashes);
  appendWithdrawal(body, 3, 0, "m", "10.9.9.9:1", hashes);
  records.applyWithdrawals(makeWithdrawalBatch(body, 3));
  records.applyWithdrawals("PW\x01\x05");  // claims five, holds none
  std::vector<uint32_t> matched(2);
  const PodId ids[] = {c.pod(0).id(), c.pod(1).id()};
  prefix.index().match("m", hashes, ids, matched);
  EXPECT_EQ(matched, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(c.metrics.withdrawals_received.Value(), 1);
  EXPECT_EQ(c.metrics.unknown_pod.Value(), 2);
  EXPECT_EQ(c.metrics.malformed.Value(), 1);
}

// Ensures the stream is read again from two snapshot intervals and a second before the snapshot (never before 0).
TEST(SnapshotChannel, ResumesTheStreamFromBeforeTheSnapshot) {
  Channels c;
  const SnapshotChannel snapshots(c.config, std::chrono::milliseconds(60000), c.keys, nullptr, nullptr, c.metrics);
  EXPECT_EQ(snapshots.streamPositionAfter(10000), "8000-0");
  EXPECT_EQ(snapshots.streamPositionAfter(100), "0-0");
}

}  // namespace
}  // namespace prefixgate::sync
