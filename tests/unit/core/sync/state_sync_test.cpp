// The pure parts of replica state sync: the record and session pin wire forms, the outbox's bounds, the load text, and the hooks in
// the prefix services (only records the index wrote are shared). The exchange through Redis is tested end to end
// with real replicas in tests/integration/test_state_sync.py.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "routing/prefix/prefix_services.h"
#include "sync/load_entries.h"
#include "sync/record_batch.h"
#include "sync/state_sync.h"
#include "unit/core/pod_specs.h"
#include "unit/index/manual_clock.h"

namespace prefixgate::sync {
namespace {

std::vector<BlockHash> hashes(std::initializer_list<uint64_t> values) {
  std::vector<BlockHash> out;
  for (uint64_t v : values) out.push_back(BlockHash{v});
  return out;
}

std::string twoRecordBatch() {
  std::string records;
  appendRecord(records, 1764633600123, "llama", "10.0.0.1:8000", hashes({1, 0xffffffffffffffffull, 3}));
  appendRecord(records, 1764633600456, "m", "[::1]:9", hashes({}));
  return makeBatch(records, 2);
}

// Ensures records round-trip through a batch with their time, model, pod and every hash bit.
TEST(RecordBatch, RoundTrips) {
  const std::string batch = twoRecordBatch();
  BatchReader reader(batch);
  Record r;
  ASSERT_TRUE(reader.next(r));
  EXPECT_EQ(r.wall_ms, 1764633600123);
  EXPECT_EQ(r.model, "llama");
  EXPECT_EQ(r.pod, "10.0.0.1:8000");
  EXPECT_EQ(r.hashes, hashes({1, 0xffffffffffffffffull, 3}));
  ASSERT_TRUE(reader.next(r));
  EXPECT_EQ(r.wall_ms, 1764633600456);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.pod, "[::1]:9");
  EXPECT_TRUE(r.hashes.empty());
  EXPECT_FALSE(reader.next(r));
  EXPECT_EQ(reader.error(), "");
}

// Ensures every truncation of a batch is reported as an error, never read past its end or taken as complete.
TEST(RecordBatch, EveryTruncationIsAnError) {
  const std::string batch = twoRecordBatch();
  for (size_t n = 0; n < batch.size(); ++n) {
    BatchReader reader(std::string_view(batch).substr(0, n));
    Record r;
    size_t records = 0;
    while (reader.next(r)) ++records;
    EXPECT_LT(records, 2u) << n;
    EXPECT_NE(reader.error(), "") << "truncated at " << n;
  }
}

// Ensures a wrong magic, a newer version, trailing bytes and an oversized block count are refused with a reason.
TEST(RecordBatch, RefusesMalformedBatches) {
  Record r;
  EXPECT_FALSE(BatchReader("XX\x01\x00").next(r));
  BatchReader newer(std::string("PG\x02\x00", 4));
  EXPECT_FALSE(newer.next(r));
  EXPECT_NE(newer.error().find("version 2"), std::string::npos);
  const std::string with_trailing = twoRecordBatch() + "x";
  BatchReader trailing(with_trailing);
  while (trailing.next(r)) {
  }
  EXPECT_NE(trailing.error().find("after the batch's last record"), std::string::npos);
  // One record claiming 2^40 blocks in a few bytes: refused before anything is allocated for them.
  std::string huge = "PG\x01\x01";
  huge += '\x05';                          // time
  huge += "\x01m\x01p";                    // model, pod
  huge += "\x80\x80\x80\x80\x80\x20";      // 2^40 blocks
  BatchReader liar(huge);
  EXPECT_FALSE(liar.next(r));
  EXPECT_NE(liar.error().find("more than the bytes left"), std::string::npos);
}

// Ensures a snapshot member is the record without its time, identical for identical records (so ZADD refreshes one
// member instead of adding another), and refuses trailing bytes.
TEST(RecordBatch, KeysIdentifyRecordsWithoutTheirTime) {
  const std::string a = encodeKey("m", "p:1", hashes({7, 8}));
  EXPECT_EQ(a, encodeKey("m", "p:1", hashes({7, 8})));
  EXPECT_NE(a, encodeKey("m", "p:2", hashes({7, 8})));
  EXPECT_NE(a, encodeKey("m", "p:1", hashes({7})));
  Record r;
  std::string error;
  ASSERT_TRUE(decodeKey(a, r, error));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.pod, "p:1");
  EXPECT_EQ(r.hashes, hashes({7, 8}));
  EXPECT_FALSE(decodeKey(a + "z", r, error));
  EXPECT_FALSE(decodeKey(a.substr(0, a.size() - 1), r, error));
}

std::string twoSessionBatch() {
  std::string sessions;
  appendSession(sessions, {1764633600500, 1764633600100, "conversation-1", "10.0.0.1:8000"});
  appendSession(sessions, {1764633600600, 1764633600600, std::string(256, 'x'), "[::1]:9"});
  return makeSessionBatch(sessions, 2);
}

// Ensures session pins round-trip through a batch with both times, the id (up to 256 bytes) and the pod.
TEST(SessionBatch, RoundTrips) {
  const std::string batch = twoSessionBatch();
  SessionBatchReader reader(batch);
  SessionPin pin;
  ASSERT_TRUE(reader.next(pin)) << reader.error();
  EXPECT_EQ(pin.wall_ms, 1764633600500);
  EXPECT_EQ(pin.pinned_ms, 1764633600100);
  EXPECT_EQ(pin.id, "conversation-1");
  EXPECT_EQ(pin.pod, "10.0.0.1:8000");
  ASSERT_TRUE(reader.next(pin)) << reader.error();
  EXPECT_EQ(pin.pinned_ms, pin.wall_ms);
  EXPECT_EQ(pin.id, std::string(256, 'x'));
  EXPECT_FALSE(reader.next(pin));
  EXPECT_EQ(reader.error(), "");
}

// Ensures every truncation of a session batch is an error, never read past its end or taken as complete.
TEST(SessionBatch, EveryTruncationIsAnError) {
  const std::string batch = twoSessionBatch();
  for (size_t n = 0; n < batch.size(); ++n) {
    SessionBatchReader reader(std::string_view(batch).substr(0, n));
    SessionPin pin;
    size_t pins = 0;
    while (reader.next(pin)) ++pins;
    EXPECT_LT(pins, 2u) << n;
    EXPECT_NE(reader.error(), "") << "truncated at " << n;
  }
}

// Ensures a session id over 256 bytes, a pin older than its epoch, a record batch read as pins and trailing bytes
// are refused with a reason.
TEST(SessionBatch, RefusesMalformedBatches) {
  std::string long_id;
  appendSession(long_id, {5, 5, std::string(257, 'x'), "p"});
  const std::string long_batch = makeSessionBatch(long_id, 1);
  SessionBatchReader too_long(long_batch);
  SessionPin pin;
  EXPECT_FALSE(too_long.next(pin));
  EXPECT_NE(too_long.error().find("session id of 257 bytes (at most 256)"), std::string::npos) << too_long.error();
  const std::string early("PS\x01\x01\x05\x06\x01s\x01p", 11);  // pinned 6 ms before time 5
  SessionBatchReader before_epoch(early);
  EXPECT_FALSE(before_epoch.next(pin));
  EXPECT_NE(before_epoch.error().find("before its time"), std::string::npos) << before_epoch.error();
  const std::string record_batch = twoRecordBatch();
  SessionBatchReader records(record_batch);
  EXPECT_FALSE(records.next(pin));
  EXPECT_EQ(records.error(), "not a session batch");
  const std::string trailing = twoSessionBatch() + "x";
  SessionBatchReader extra(trailing);
  while (extra.next(pin)) {
  }
  EXPECT_NE(extra.error().find("after the batch's last session"), std::string::npos);
}

// Ensures a sessions snapshot member is the pin without its use time (a refresh updates one member's score) and
// that decoding refuses truncations, trailing bytes and an oversized id.
TEST(SessionBatch, KeysIdentifyPinsWithoutTheirUseTime) {
  const std::string key = encodeSessionKey({900, 700, "conv", "p:1"});
  EXPECT_EQ(key, encodeSessionKey({950, 700, "conv", "p:1"}));
  EXPECT_NE(key, encodeSessionKey({950, 940, "conv", "p:1"}));  // pinned again: another member
  EXPECT_NE(key, encodeSessionKey({900, 700, "conv", "p:2"}));
  SessionPin pin;
  std::string error;
  ASSERT_TRUE(decodeSessionKey(key, pin, error)) << error;
  EXPECT_EQ(pin.id, "conv");
  EXPECT_EQ(pin.pod, "p:1");
  EXPECT_EQ(pin.pinned_ms, 700);
  EXPECT_FALSE(decodeSessionKey(key + "z", pin, error));
  for (size_t n = 0; n < key.size(); ++n) EXPECT_FALSE(decodeSessionKey(key.substr(0, n), pin, error)) << n;
  EXPECT_FALSE(decodeSessionKey(encodeSessionKey({1, 1, std::string(257, 'x'), "p"}), pin, error));
}

size_t countRecords(const Outbox::Taken& taken) {
  std::string_view in = taken.records;
  Record r;
  std::string error;
  size_t n = 0;
  while (!in.empty() && readRecord(in, r, error)) ++n;
  EXPECT_TRUE(in.empty());
  return n;
}

// Ensures the outbox shares only a record's first max_blocks_per_record blocks.
TEST(Outbox, CutsLongRecords) {
  Outbox box(1 << 20, 1 << 20, 2);
  ASSERT_EQ(box.add(1, 0, "m", "p", hashes({1, 2, 3, 4})), Outbox::Added::kQueued);
  Outbox::Taken t = box.take();
  ASSERT_EQ(t.count, 1u);
  std::string_view in = t.records;
  Record r;
  std::string error;
  ASSERT_TRUE(readRecord(in, r, error));
  EXPECT_EQ(r.hashes, hashes({1, 2}));
  EXPECT_EQ(box.take().count, 0u);  // taking empties it
}

// The bytes one record of `blocks` takes in the outbox (and on the wire).
size_t recordBytes(int64_t wall_ms, const std::vector<BlockHash>& blocks) {
  std::string one;
  appendRecord(one, wall_ms, "m", "p", blocks);
  return one.size();
}

// Ensures the send rate is capped by a token bucket with one second of burst that refills with time.
TEST(Outbox, CapsTheSendRate) {
  const std::vector<BlockHash> block = hashes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const size_t size = recordBytes(1, block);
  Outbox box(1 << 20, 1000, 64);
  size_t queued = 0;
  while (queued < 1000 && box.add(1, 0, "m", "p", block) == Outbox::Added::kQueued) ++queued;
  EXPECT_EQ(queued, 1000 / size);  // one second's worth at once, then nothing
  EXPECT_EQ(box.add(1, 0, "m", "p", block), Outbox::Added::kOverRate);
  EXPECT_EQ(box.add(1, 500, "m", "p", block), Outbox::Added::kQueued);  // half a second refilled ~500 bytes
  EXPECT_EQ(countRecords(box.take()), queued + 1);
}

// Ensures records waiting for Redis are bounded in bytes, and that a batch put back after a failure goes ahead of
// newer records as far as the bound allows (the rest is dropped and counted by the caller).
TEST(Outbox, BoundsWaitingBytesAndPutsBackOldestFirst) {
  const std::vector<BlockHash> block = hashes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const size_t size = recordBytes(100, block);  // every time below encodes in as many bytes
  Outbox box(size * 5 / 2, 1 << 20, 64);  // room for two and a half records
  ASSERT_EQ(box.add(100, 0, "m", "p", block), Outbox::Added::kQueued);
  ASSERT_EQ(box.add(101, 0, "m", "p", block), Outbox::Added::kQueued);
  EXPECT_EQ(box.add(102, 0, "m", "p", block), Outbox::Added::kFull);
  Outbox::Taken failed = box.take();
  ASSERT_EQ(box.add(103, 0, "m", "p", block), Outbox::Added::kQueued);
  EXPECT_EQ(box.putBack(std::move(failed)).records, 1u);  // room for the older of the two only
  EXPECT_EQ(box.pendingBytes(), 2 * size);
  EXPECT_EQ(box.add(104, 0, "m", "p", block), Outbox::Added::kFull);
  Outbox::Taken t = box.take();
  std::string_view in = t.records;
  Record r;
  std::string error;
  std::vector<int64_t> times;
  while (!in.empty() && readRecord(in, r, error)) times.push_back(r.wall_ms);
  EXPECT_EQ(times, (std::vector<int64_t>{100, 103}));
  EXPECT_EQ(t.count, 2u);
}

// Ensures session pins share the records' byte bound, are taken with them, and are put back oldest first after a
// failed send (what does not fit beside the pins queued since is dropped and counted).
TEST(Outbox, QueuesSessionPinsBesideRecordsUnderOneBound) {
  std::string one;
  appendSession(one, {100, 100, "s", "p"});
  Outbox box(one.size() * 2, 1 << 20, 64);
  ASSERT_EQ(box.addSession(0, {100, 100, "s", "p"}), Outbox::Added::kQueued);
  ASSERT_EQ(box.addSession(0, {101, 101, "t", "p"}), Outbox::Added::kQueued);
  EXPECT_EQ(box.addSession(0, {102, 102, "u", "p"}), Outbox::Added::kFull);
  EXPECT_EQ(box.add(102, 0, "m", "p", hashes({1})), Outbox::Added::kFull);  // the records' room is the same
  Outbox::Taken failed = box.take();
  EXPECT_EQ(failed.session_count, 2u);
  EXPECT_EQ(failed.count, 0u);
  ASSERT_EQ(box.addSession(0, {103, 103, "v", "p"}), Outbox::Added::kQueued);
  const Outbox::Dropped dropped = box.putBack(std::move(failed));
  EXPECT_EQ(dropped.sessions, 1u);
  EXPECT_EQ(dropped.records, 0u);
  Outbox::Taken t = box.take();
  std::string_view in = t.sessions;
  SessionPin pin;
  std::string error;
  std::vector<std::string> ids;
  while (!in.empty() && readSession(in, pin, error)) ids.emplace_back(pin.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"s", "v"}));
  EXPECT_EQ(t.session_count, 2u);
}

// Ensures a replica's published loads list only pods with requests in flight, and that reading several replicas'
// texts sums them per pod, skipping malformed lines.
TEST(Loads, EncodeAndSumAcrossReplicas) {
  EXPECT_EQ(encodeLoads({{"a:1", 3}, {"b:2", 0}, {"c:3", 1}}), "a:1 3\nc:3 1\n");
  std::map<std::string, int32_t, std::less<>> sum;
  decodeLoads("a:1 3\nc:3 1\n", sum);
  decodeLoads("a:1 2\nbroken\n 4\nd:4 -2\ne:5 x\nc:3 1", sum);
  EXPECT_EQ(sum, (std::map<std::string, int32_t, std::less<>>{{"a:1", 5}, {"c:3", 2}}));
}

// Ensures hostile load texts (anything can write Redis) give counts in [1, 2^20]: INT32_MAX plus more for one pod
// (issue 24: it wrapped to -2147483647 and let requests past max_in_flight_per_pod), numbers beyond 32 and 64 bits,
// negative, non-numeric, with trailing bytes, overlong. No signed overflow on the way (UBSan runs this in CI).
TEST(Loads, HostileCountsAreClampedNeverNegative) {
  constexpr int32_t kSane = 1 << 20;
  std::map<std::string, int32_t, std::less<>> sum;
  decodeLoads("a:1 2147483647\na:1 2\n", sum);
  ASSERT_EQ(sum.count("a:1"), 1u);
  EXPECT_GT(sum.at("a:1"), 0);
  EXPECT_LE(sum.at("a:1"), kSane);
  decodeLoads("a:1 2147483647\n", sum);  // another text adding to the same map
  EXPECT_GT(sum.at("a:1"), 0);
  EXPECT_LE(sum.at("a:1"), kSane);
  sum.clear();
  decodeLoads("b:2 9223372036854775807\nc:3 99999999999999999999999\nd:4 -2147483648\ne:5 0x10\nf:6 12abc\n"
              "g:7 4294967298\nh:8 -1\ni:9  \nj:10 " + std::string(100000, '9') + "\nk:11 7\n",
              sum);
  for (const auto& [address, n] : sum) {
    EXPECT_GT(n, 0) << address;
    EXPECT_LE(n, kSane) << address;
  }
  for (const char* skipped : {"c:3", "d:4", "e:5", "f:6", "h:8", "i:9", "j:10"})
    EXPECT_EQ(sum.count(skipped), 0u) << skipped;
  EXPECT_EQ(sum.at("k:11"), 7);
}

// Ensures the sums over replicas saturate at kMaxRemoteInFlight and never go below zero, whatever the terms.
TEST(Loads, SumsOverReplicasSaturate) {
  EXPECT_EQ(kMaxRemoteInFlight, 1 << 20);
  EXPECT_EQ(addLoads(3, 4), 7);
  EXPECT_EQ(addLoads(INT32_MAX, 2), kMaxRemoteInFlight);
  EXPECT_EQ(addLoads(INT64_MAX, INT64_MAX), kMaxRemoteInFlight);
  EXPECT_EQ(addLoads(INT64_MIN, -5), 0);
  EXPECT_EQ(addLoads(-7, 5), 5);
  std::map<std::string, int32_t, std::less<>> by_replica;
  for (int i = 0; i < 4000; ++i) by_replica["r" + std::to_string(i)] = INT32_MAX;
  EXPECT_EQ(sumLoads(by_replica), kMaxRemoteInFlight);
  by_replica = {{"a", 2}, {"b", -2147483647 - 1}, {"c", 3}};
  EXPECT_EQ(sumLoads(by_replica), 5);
}

class CountingSink : public routing::RecordSink {
 public:
  void recordWritten(std::string_view model, std::span<const BlockHash> h, const discovery::PodState& pod) override {
    calls.push_back({std::string(model), pod.name(), h.size()});
  }
  void recordWithdrawn(std::string_view model, std::span<const BlockHash> h, size_t keep,
                       const discovery::PodState& pod) override {
    withdrawn.push_back({std::string(model), pod.name(), h.size(), keep});
  }
  struct Call {
    std::string model, pod;
    size_t blocks;
    size_t keep = 0;
    bool operator==(const Call&) const = default;
  };
  std::vector<Call> calls;
  std::vector<Call> withdrawn;
};

// Ensures the prefix services pass a routed record to the sink only when the index wrote something (a prefix resent
// within the refresh interval is not shared again), and never pass on a record another replica shared.
TEST(StateSyncHooks, OnlyWrittenOwnRecordsReachTheSink) {
  index::testing::ManualClock clock;
  index::PrefixIndexOptions options;
  options.block_capacity = 1000;
  options.expiry = std::chrono::minutes(20);
  routing::PrefixServices services(std::make_unique<tokenize::CharacterTokenizer>(), 4, 0, options, &clock);
  CountingSink sink;
  services.setRecordSink(&sink);
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2)});
  const auto snapshot = pods.snapshot();
  const discovery::PodState& a = *snapshot->pods()[0];
  const discovery::PodState& b = *snapshot->pods()[1];
  const std::vector<BlockHash> prompt = hashes({11, 12, 13});
  ASSERT_TRUE(services.recordRouted("m", prompt, a));
  ASSERT_TRUE(services.recordRouted("m", prompt, a));  // held from this very moment: nothing written
  ASSERT_TRUE(services.recordRouted("m", prompt, b));
  ASSERT_TRUE(services.recordRouted("m", hashes({11, 12, 13, 14}), a));  // one block longer: written
  ASSERT_TRUE(services.recordRouted("m", hashes({21}), b, /*shared=*/false));
  clock.advance(std::chrono::seconds(1));  // past the refresh interval: rewritten, shared again
  ASSERT_TRUE(services.recordRouted("m", prompt, a));
  using Call = CountingSink::Call;
  EXPECT_EQ(sink.calls, (std::vector<Call>{{"m", "a", 3}, {"m", "b", 3}, {"m", "a", 4}, {"m", "a", 3}}));
  // The record from another replica is in the index all the same.
  std::vector<uint32_t> matched(1);
  const PodId ids[] = {b.id()};
  EXPECT_EQ(services.index().match("m", hashes({21}), ids, matched), 1u);
}

// Ensures a withdrawal takes the blocks past `keep` out of the index for that pod only, reaches the sink (with the
// whole record and its keep) only when it is this gateway's own and withdrew anything, and frees the capacity the
// blocks took in a paged pod's ledger (so they no longer push its other blocks out).
TEST(StateSyncHooks, OwnWithdrawalsReachTheSinkAndFreeTheLedger) {
  index::testing::ManualClock clock;
  index::PrefixIndexOptions options;
  options.block_capacity = 1000;
  options.expiry = std::chrono::minutes(20);
  routing::PrefixServices services(std::make_unique<tokenize::CharacterTokenizer>(), 4, 0, options, &clock);
  services.setCapacityAware(true);
  CountingSink sink;
  services.setRecordSink(&sink);
  discovery::PodRegistry pods;
  auto spec_a = testing::podSpec("a", 1);
  spec_a.kv_capacity_tokens = 1000;  // room for every block below
  pods.update({spec_a, testing::podSpec("b", 2)});
  const auto snapshot = pods.snapshot();
  const discovery::PodState& a = *snapshot->pods()[0];
  const discovery::PodState& b = *snapshot->pods()[1];
  const std::vector<BlockHash> prompt = hashes({11, 12, 13});
  ASSERT_TRUE(services.recordRouted("m", prompt, a));
  ASSERT_TRUE(services.recordRouted("m", prompt, b));
  ASSERT_EQ(services.ledger().blocks(a.id()), 3u);
  services.withdrawRouted("m", prompt, 1, a);
  services.withdrawRouted("m", prompt, 3, b);  // keeps everything: nothing withdrawn, nothing shared
  services.withdrawRouted("m", hashes({21, 22}), 0, b, /*shared=*/false);
  using Call = CountingSink::Call;
  EXPECT_EQ(sink.withdrawn, (std::vector<Call>{{"m", "a", 3, 1}}));
  std::vector<uint32_t> matched(2);
  const PodId ids[] = {a.id(), b.id()};
  services.index().match("m", prompt, ids, matched);
  EXPECT_EQ(matched, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(services.ledger().blocks(a.id()), 1u);  // the capacity the withdrawn blocks took is free again
}

// Ensures withdrawals round-trip through a batch (time, keep, model, pod, hashes), that a keep beyond the record's
// blocks is refused, and that a withdrawal batch is never read as a record batch.
TEST(WithdrawalBatch, RoundTripsAndRefusesAKeepBeyondItsBlocks) {
  std::string body;
  appendWithdrawal(body, 1764633600123, 1, "llama", "10.0.0.1:8000", hashes({7, 8, 9}));
  appendWithdrawal(body, 5, 9, "m", "p", hashes({1}));  // keep is cut to the blocks when written
  const std::string batch = makeWithdrawalBatch(body, 2);
  WithdrawalBatchReader reader(batch);
  Withdrawal w;
  ASSERT_TRUE(reader.next(w));
  EXPECT_EQ(w.record.wall_ms, 1764633600123);
  EXPECT_EQ(w.keep, 1u);
  EXPECT_EQ(w.record.model, "llama");
  EXPECT_EQ(w.record.pod, "10.0.0.1:8000");
  EXPECT_EQ(w.record.hashes, hashes({7, 8, 9}));
  EXPECT_EQ(std::vector<BlockHash>(w.withdrawn().begin(), w.withdrawn().end()), hashes({8, 9}));
  ASSERT_TRUE(reader.next(w));
  EXPECT_EQ(w.keep, 1u);
  EXPECT_FALSE(reader.next(w));
  EXPECT_EQ(reader.error(), "");
  BatchReader as_records(batch);
  Record r;
  EXPECT_FALSE(as_records.next(r));
  EXPECT_EQ(as_records.error(), "not a record batch");
  // Hand-made: keep 4 of 3 blocks.
  std::string bad = batch;
  bad[batch.find("llama") - 2] = 4;  // the keep varint sits before the model's length
  WithdrawalBatchReader hostile(bad);
  EXPECT_FALSE(hostile.next(w));
  EXPECT_EQ(hostile.error(), "withdrawal keeps 4 of its 3 blocks");
  for (size_t n = 0; n < batch.size(); ++n) {
    WithdrawalBatchReader cut(std::string_view(batch).substr(0, n));
    size_t read = 0;
    while (cut.next(w)) ++read;
    EXPECT_FALSE(cut.error().empty()) << "truncated at " << n;
    EXPECT_LT(read, 2u);
  }
}

// Ensures withdrawals share the records' byte bound, are cut to the blocks a record is shared with, and are put
// back after a failed send.
TEST(Outbox, QueuesWithdrawalsUnderTheSameBound) {
  std::string one;
  appendWithdrawal(one, 100, 1, "m", "p", hashes({1, 2}));
  Outbox box(one.size() * 2, 1 << 20, 2);
  ASSERT_EQ(box.addWithdrawal(100, 0, "m", "p", hashes({1, 2, 3, 4}), 1), Outbox::Added::kQueued);
  EXPECT_EQ(box.pendingBytes(), one.size());
  ASSERT_EQ(box.addWithdrawal(101, 0, "m", "p", hashes({1, 2}), 1), Outbox::Added::kQueued);
  EXPECT_EQ(box.addWithdrawal(102, 0, "m", "p", hashes({1, 2}), 1), Outbox::Added::kFull);
  Outbox::Taken t = box.take();
  EXPECT_EQ(t.withdrawal_count, 2u);
  EXPECT_FALSE(t.empty());
  std::string_view in = t.withdrawals;
  Withdrawal w;
  std::string error;
  ASSERT_TRUE(readWithdrawal(in, w, error));
  EXPECT_EQ(w.record.hashes, hashes({1, 2}));
  ASSERT_EQ(box.add(103, 0, "m", "p", hashes({5})), Outbox::Added::kQueued);
  const Outbox::Dropped dropped = box.putBack(std::move(t));
  EXPECT_EQ(dropped.withdrawals, 1u);  // one fits beside the record queued since
  EXPECT_EQ(box.take().withdrawal_count, 1u);
}

}  // namespace
}  // namespace prefixgate::sync
