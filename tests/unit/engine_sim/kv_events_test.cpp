// KV cache events: what the scheduler records as its cache changes, and their msgpack encoding in vLLM's two
// layouts (decoded back with nlohmann's msgpack reader).
#include "engine_sim/kv_events.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine_sim/scheduler.h"
#include "unit/token_runs.h"

namespace prefixgate::sim {
namespace {

using testing::tokens;

using nlohmann::json;

json decode(const std::string& bytes) { return json::from_msgpack(bytes); }

// Ensures the array layout is [ts, events, rank] with positional event fields, hashes as unsigned integers.
TEST(KvEvents, ArrayEncoding) {
  std::vector<KvEvent> events = {
      KvEvent{KvEvent::Kind::kStored, {EngineBlockHash{0xffffffffffffffffull}}, EngineBlockHash{7}, {1, 2}},
      KvEvent{KvEvent::Kind::kRemoved, {EngineBlockHash{9}}, std::nullopt, {}},
      KvEvent{KvEvent::Kind::kCleared, {}, std::nullopt, {}}};
  json batch = decode(encodeKvEventBatch(12.5, events, 16, 0, KvEventEncoding::kArray));
  ASSERT_TRUE(batch.is_array());
  EXPECT_EQ(batch[0], 12.5);
  EXPECT_EQ(batch[2], 0);
  EXPECT_EQ(batch[1][0], json::parse(R"(["BlockStored", [18446744073709551615], 7, [1, 2], 16, null, "GPU", null])"));
  EXPECT_TRUE(batch[1][0][1][0].is_number_unsigned());
  EXPECT_EQ(batch[1][1], json::parse(R"(["BlockRemoved", [9], "GPU"])"));
  EXPECT_EQ(batch[1][2], json::parse(R"(["AllBlocksCleared"])"));
}

// Ensures the map layout names every field and tags events under "type"; a first block has a null parent.
TEST(KvEvents, MapEncoding) {
  std::vector<KvEvent> events = {KvEvent{KvEvent::Kind::kStored, {EngineBlockHash{3}}, std::nullopt, {5}}};
  json batch = decode(encodeKvEventBatch(1.0, events, 16, 2, KvEventEncoding::kMap));
  EXPECT_EQ(batch["data_parallel_rank"], 2);
  json event = batch["events"][0];
  EXPECT_EQ(event["type"], "BlockStored");
  EXPECT_EQ(event["block_hashes"], json::array({3}));
  EXPECT_TRUE(event["parent_block_hash"].is_null());
  EXPECT_EQ(event["token_ids"], json::array({5}));
  EXPECT_EQ(event["block_size"], 16);
  EXPECT_EQ(event["medium"], "GPU");
  EXPECT_EQ(parseKvEventEncoding("map"), KvEventEncoding::kMap);
  EXPECT_FALSE(parseKvEventEncoding("xml"));
}

// Ensures the scheduler records one BlockStored per allocation with the blocks' tokens and chained parents,
// output blocks included, and a BlockRemoved for blocks evicted to make room, before the blocks that took them.
TEST(KvEvents, SchedulerRecordsStoredAndRemoved) {
  Scheduler scheduler(SchedulerConfig{4, 16, 8, 8192});
  scheduler.recordEvents();
  scheduler.submit({1, tokens(0, 40), 10});  // 40 prompt tokens: two full blocks at once
  scheduler.complete(scheduler.schedule());
  std::vector<KvEvent> first = scheduler.takeEvents();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(first[0].block_hashes.size(), 2u);
  EXPECT_FALSE(first[0].parent);
  EXPECT_EQ(first[0].token_ids, tokens(0, 32));
  while (scheduler.hasWork()) scheduler.complete(scheduler.schedule());
  std::vector<KvEvent> output = scheduler.takeEvents();  // token 48 completes the third block (8 output tokens)
  ASSERT_EQ(output.size(), 1u);
  EXPECT_EQ(output[0].parent, first[0].block_hashes.back());
  EXPECT_EQ(std::vector<uint32_t>(output[0].token_ids.begin(), output[0].token_ids.begin() + 8), tokens(32, 8));
  scheduler.submit({2, tokens(900, 60), 1});  // four fresh blocks: the three cached ones are evicted
  scheduler.schedule();
  std::vector<KvEvent> next = scheduler.takeEvents();
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(next[0].block_hashes.size(), 3u);
  EXPECT_EQ(next[1].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(next[1].block_hashes.size(), 3u);
}


// Ensures a salted request's blocks hash apart from the same prompt unsalted (and from another salt), and its first
// BlockStored carries the salt as the first block's extra keys, the rest null, as vLLM's extra_keys do.
TEST(KvEvents, CacheSaltSeparatesBlocksAndIsSentAsTheFirstBlocksExtraKeys) {
  EXPECT_NE(blockHashes(tokens(0, 32), 16, "tenant-a"), blockHashes(tokens(0, 32), 16));
  EXPECT_NE(blockHashes(tokens(0, 32), 16, "tenant-a"), blockHashes(tokens(0, 32), 16, "tenant-b"));
  EXPECT_EQ(blockHashes(tokens(0, 32), 16, ""), blockHashes(tokens(0, 32), 16));
  Scheduler scheduler(SchedulerConfig{4, 16, 8, 8192});
  scheduler.recordEvents();
  SeqRequest salted{1, tokens(0, 40), 1};
  salted.cache_salt = "tenant-a";
  scheduler.submit(std::move(salted));
  scheduler.complete(scheduler.schedule());
  std::vector<KvEvent> events = scheduler.takeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].first_block_salt, "tenant-a");
  EXPECT_EQ(events[0].block_hashes, blockHashes(tokens(0, 40), 16, "tenant-a"));
  for (KvEventEncoding encoding : {KvEventEncoding::kArray, KvEventEncoding::kMap}) {
    json batch = decode(encodeKvEventBatch(1.0, events, 16, 0, encoding));
    json event = encoding == KvEventEncoding::kArray ? batch[1][0] : batch["events"][0];
    json extra = encoding == KvEventEncoding::kArray ? event[8] : event["extra_keys"];
    EXPECT_EQ(extra, json::parse(R"([["tenant-a"], null])"));
  }
  // The unsalted event has no extra_keys field at all (vLLM omits a default).
  json plain = decode(encodeKvEventBatch(1.0, std::vector<KvEvent>{KvEvent{KvEvent::Kind::kStored, {EngineBlockHash{3}},
                                                                          std::nullopt, {5}}},
                                         16, 0, KvEventEncoding::kArray));
  EXPECT_EQ(plain[1][0].size(), 8u);
}
}  // namespace
}  // namespace prefixgate::sim
