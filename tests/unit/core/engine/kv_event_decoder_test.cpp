#include "engine/kv_event_decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

namespace prefixgate::engine {
namespace {

using nlohmann::json;
using Bytes = std::vector<uint8_t>;

// A msgpack writer for the encodings nlohmann never produces (a positive value in a signed type, absurd declared
// lengths, msgspec's field order) and for splicing hand-made events into a batch.
class Pack {
 public:
  Pack& arr(uint32_t n) { return header(n, 0x90, 0xdc, 0xdd); }
  Pack& map(uint32_t n) { return header(n, 0x80, 0xde, 0xdf); }
  Pack& str(std::string_view s) {
    if (s.size() < 32) {
      byte(static_cast<uint8_t>(0xa0 | s.size()));
    } else {
      byte(0xd9).be(s.size(), 1);
    }
    bytes.insert(bytes.end(), s.begin(), s.end());
    return *this;
  }
  Pack& uint(uint64_t v) { return v < 128 ? byte(static_cast<uint8_t>(v)) : byte(0xcf).be(v, 8); }
  Pack& i64(int64_t v) { return byte(0xd3).be(static_cast<uint64_t>(v), 8); }  // always the signed 8-byte form
  Pack& i8(int8_t v) { return byte(0xd0).be(static_cast<uint8_t>(v), 1); }
  Pack& nil() { return byte(0xc0); }
  Pack& f64(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    return byte(0xcb).be(bits, 8);
  }
  Pack& bin(const Bytes& b) {
    byte(0xc4).be(b.size(), 1);
    bytes.insert(bytes.end(), b.begin(), b.end());
    return *this;
  }
  Pack& raw(std::initializer_list<uint8_t> b) {
    bytes.insert(bytes.end(), b);
    return *this;
  }
  Pack& append(const Bytes& b) {
    bytes.insert(bytes.end(), b.begin(), b.end());
    return *this;
  }
  Pack& byte(uint8_t b) {
    bytes.push_back(b);
    return *this;
  }
  Pack& be(uint64_t v, int width) {
    for (int i = width - 1; i >= 0; --i) bytes.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  Bytes bytes;

 private:
  Pack& header(uint32_t n, uint8_t fix, uint8_t b16, uint8_t b32) {
    if (n < 16) return byte(static_cast<uint8_t>(fix | n));
    if (n < 65536) return byte(b16).be(n, 2);
    return byte(b32).be(n, 4);
  }
};

Bytes pack(const json& j) { return json::to_msgpack(j); }

// An array-form batch [ts, events, rank] around already-encoded events.
Bytes batchOfEvents(const std::vector<Bytes>& events, int rank = 0) {
  Pack p;
  p.arr(3).f64(1.5).arr(static_cast<uint32_t>(events.size()));
  for (const Bytes& e : events) p.append(e);
  p.uint(static_cast<uint64_t>(rank));
  return p.bytes;
}
Bytes batchOf(const json& event) { return batchOfEvents({pack(event)}); }

struct Result {
  bool ok = false;
  KvEventBatch batch;
  std::string error;
};
Result decode(const Bytes& bytes) {
  Result r;
  r.ok = decodeKvEventBatch(bytes, r.batch, r.error);
  return r;
}
const KvBlockStored& stored(const Result& r, size_t i) { return std::get<KvBlockStored>(r.batch.events.at(i)); }
const KvBlockRemoved& removed(const Result& r, size_t i) { return std::get<KvBlockRemoved>(r.batch.events.at(i)); }

json storedArray(json hashes, json tokens = {1, 2, 3, 4}, uint32_t block_size = 2) {
  return json::array({"BlockStored", std::move(hashes), nullptr, std::move(tokens), block_size});
}

// Two payloads from the simulator's encodeKvEventBatch (loadtest/engine_sim/kv_events.cpp) at ts 1700000000.25,
// block size 4, rank 3: BlockStored of hashes 0x1111222233334444 and 0xfedcba9876543210 after parent 7 with tokens
// 1 2 3 4 100000 6 7 8, BlockRemoved of 42, AllBlocksCleared. Array encoding, then map encoding.
const Bytes kSimArray = {
    0x93, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x10, 0x00, 0x00, 0x93, 0x98, 0xab, 0x42, 0x6c, 0x6f, 0x63, 0x6b,
    0x53, 0x74, 0x6f, 0x72, 0x65, 0x64, 0x92, 0xcf, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0xcf, 0xfe,
    0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10, 0x07, 0x98, 0x01, 0x02, 0x03, 0x04, 0xce, 0x00, 0x01, 0x86, 0xa0,
    0x06, 0x07, 0x08, 0x04, 0xc0, 0xa3, 0x47, 0x50, 0x55, 0xc0, 0x93, 0xac, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x52,
    0x65, 0x6d, 0x6f, 0x76, 0x65, 0x64, 0x91, 0x2a, 0xa3, 0x47, 0x50, 0x55, 0x91, 0xb0, 0x41, 0x6c, 0x6c, 0x42,
    0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x43, 0x6c, 0x65, 0x61, 0x72, 0x65, 0x64, 0x03};
const Bytes kSimMap = {
    0x83, 0xb2, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x70, 0x61, 0x72, 0x61, 0x6c, 0x6c, 0x65, 0x6c, 0x5f, 0x72, 0x61,
    0x6e, 0x6b, 0x03, 0xa6, 0x65, 0x76, 0x65, 0x6e, 0x74, 0x73, 0x93, 0x88, 0xac, 0x62, 0x6c, 0x6f, 0x63, 0x6b,
    0x5f, 0x68, 0x61, 0x73, 0x68, 0x65, 0x73, 0x92, 0xcf, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0xcf,
    0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10, 0xaa, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x73, 0x69, 0x7a,
    0x65, 0x04, 0xa7, 0x6c, 0x6f, 0x72, 0x61, 0x5f, 0x69, 0x64, 0xc0, 0xa9, 0x6c, 0x6f, 0x72, 0x61, 0x5f, 0x6e,
    0x61, 0x6d, 0x65, 0xc0, 0xa6, 0x6d, 0x65, 0x64, 0x69, 0x75, 0x6d, 0xa3, 0x47, 0x50, 0x55, 0xb1, 0x70, 0x61,
    0x72, 0x65, 0x6e, 0x74, 0x5f, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x68, 0x61, 0x73, 0x68, 0x07, 0xa9, 0x74,
    0x6f, 0x6b, 0x65, 0x6e, 0x5f, 0x69, 0x64, 0x73, 0x98, 0x01, 0x02, 0x03, 0x04, 0xce, 0x00, 0x01, 0x86, 0xa0,
    0x06, 0x07, 0x08, 0xa4, 0x74, 0x79, 0x70, 0x65, 0xab, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x53, 0x74, 0x6f, 0x72,
    0x65, 0x64, 0x83, 0xac, 0x62, 0x6c, 0x6f, 0x63, 0x6b, 0x5f, 0x68, 0x61, 0x73, 0x68, 0x65, 0x73, 0x91, 0x2a,
    0xa6, 0x6d, 0x65, 0x64, 0x69, 0x75, 0x6d, 0xa3, 0x47, 0x50, 0x55, 0xa4, 0x74, 0x79, 0x70, 0x65, 0xac, 0x42,
    0x6c, 0x6f, 0x63, 0x6b, 0x52, 0x65, 0x6d, 0x6f, 0x76, 0x65, 0x64, 0x81, 0xa4, 0x74, 0x79, 0x70, 0x65, 0xb0,
    0x41, 0x6c, 0x6c, 0x42, 0x6c, 0x6f, 0x63, 0x6b, 0x73, 0x43, 0x6c, 0x65, 0x61, 0x72, 0x65, 0x64, 0xa2, 0x74,
    0x73, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x10, 0x00, 0x00};

void expectSimBatch(const Result& r) {
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_DOUBLE_EQ(r.batch.timestamp, 1700000000.25);
  EXPECT_EQ(r.batch.data_parallel_rank, 3u);
  EXPECT_EQ(r.batch.skipped_events, 0u);
  ASSERT_EQ(r.batch.events.size(), 3u);
  const KvBlockStored& s = stored(r, 0);
  EXPECT_EQ(s.block_hashes, (std::vector<EngineBlockHash>{{0x1111222233334444ull}, {0xfedcba9876543210ull}}));
  EXPECT_EQ(s.parent, EngineBlockHash{7});
  EXPECT_EQ(s.token_ids, (std::vector<uint32_t>{1, 2, 3, 4, 100000, 6, 7, 8}));
  EXPECT_EQ(s.block_size, 4u);
  EXPECT_EQ(s.medium, KvMedium::kGpu);
  EXPECT_FALSE(s.lora_id.has_value());
  EXPECT_EQ(s.lora_name, "");
  EXPECT_TRUE(s.extra_keys.empty());
  EXPECT_EQ(s.group_idx, 0u);
  EXPECT_EQ(removed(r, 1).block_hashes, (std::vector<EngineBlockHash>{{42}}));
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(r.batch.events[2]));
}

// The simulator's array encoding decodes to the batch it was built from.
TEST(KvEventDecoder, SimulatorArrayPayload) { expectSimBatch(decode(kSimArray)); }

// The simulator's map encoding (keys sorted, "type" last) decodes to the same batch.
TEST(KvEventDecoder, SimulatorMapPayload) { expectSimBatch(decode(kSimMap)); }

// Current vLLM (msgspec, omit_defaults, map form): "type" first, fields in declaration order, group_idx and the
// kv_cache_spec fields present, a CPU-tier event from the offloading connector.
TEST(KvEventDecoder, MsgspecMapForm) {
  Pack p;
  p.map(3).str("ts").f64(2.0).str("events").arr(2);
  p.map(11).str("type").str("BlockStored").str("block_hashes").arr(1).uint(99).str("parent_block_hash").nil();
  p.str("token_ids").arr(2).uint(5).uint(6).str("block_size").uint(2).str("lora_id").nil().str("medium").str("GPU");
  p.str("lora_name").nil().str("group_idx").uint(1).str("kv_cache_spec_kind").str("sliding_window");
  p.str("kv_cache_spec_sliding_window").uint(4096);
  p.map(3).str("type").str("BlockRemoved").str("block_hashes").arr(1).uint(99).str("medium").str("CPU");
  p.str("data_parallel_rank").uint(0);
  Result r = decode(p.bytes);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.batch.events.size(), 2u);
  EXPECT_EQ(stored(r, 0).group_idx, 1u);
  EXPECT_EQ(stored(r, 0).token_ids, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(removed(r, 1).medium, KvMedium::kCpu);
  EXPECT_EQ(r.batch.data_parallel_rank, 0u);
}

// The two levels are independent: an array batch may carry map events and a map batch array events, mixed.
TEST(KvEventDecoder, MixedEncodingsAtBothLevels) {
  json map_event = {{"type", "BlockRemoved"}, {"block_hashes", {5}}};
  json array_event = json::array({"BlockRemoved", json::array({6})});
  Result a = decode(pack(json::array({1.0, json::array({map_event, array_event})})));
  Result m = decode(pack(json{{"ts", 1.0}, {"events", json::array({array_event, map_event})}}));
  ASSERT_TRUE(a.ok && m.ok);
  EXPECT_EQ(removed(a, 0).block_hashes[0].value, 5u);
  EXPECT_EQ(removed(a, 1).block_hashes[0].value, 6u);
  EXPECT_EQ(removed(m, 0).block_hashes[0].value, 6u);
  EXPECT_EQ(removed(m, 1).block_hashes[0].value, 5u);
}

// Every hash shape maps to one uint64: unsigned as is, signed by two's complement (also a positive value sent in
// a signed type), a binary digest as its last 8 bytes big-endian (shorter digests whole, as Python's
// int.from_bytes(...) & (2**64 - 1) does).
TEST(KvEventDecoder, HashShapes) {
  Bytes digest32(32);
  for (size_t i = 0; i < digest32.size(); ++i) digest32[i] = static_cast<uint8_t>(i + 1);
  const Bytes digest8 = {0x80, 0, 0, 0, 0, 0, 0, 0x01};
  Pack hashes;
  hashes.arr(7).uint(UINT64_MAX).i64(-1).i64(-2).i64(77).bin(digest32).bin(digest8).bin({0x01, 0x02, 0x03});
  Pack event;
  event.arr(2).str("BlockRemoved").append(hashes.bytes);
  Result r = decode(batchOfEvents({event.bytes}));
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.batch.events.size(), 1u);
  const auto& h = removed(r, 0).block_hashes;
  ASSERT_EQ(h.size(), 7u);
  EXPECT_EQ(h[0].value, UINT64_MAX);
  EXPECT_EQ(h[1].value, UINT64_MAX);
  EXPECT_EQ(h[2].value, UINT64_MAX - 1);
  EXPECT_EQ(h[3].value, 77u);
  EXPECT_EQ(h[4].value, 0x191a1b1c1d1e1f20ull);
  EXPECT_EQ(h[5].value, 0x8000000000000001ull);
  EXPECT_EQ(h[6].value, 0x010203u);
}

// A pod that sends digests and one that sends vLLM's int conversion of the same digest report the same block,
// and a binary parent hash reads the same way.
TEST(KvEventDecoder, DigestAndItsIntAgree) {
  Bytes digest(32, 0xab);
  digest[24] = 0x01;
  json as_bin = storedArray(json::array({json::binary(digest)}));
  as_bin[2] = json::binary(digest);
  json as_int = storedArray(json::array({0x01ababababababab}));
  as_int[2] = 0x01ababababababab;
  Result b = decode(batchOf(as_bin));
  Result i = decode(batchOf(as_int));
  ASSERT_TRUE(b.ok && i.ok);
  EXPECT_EQ(stored(b, 0).block_hashes, stored(i, 0).block_hashes);
  EXPECT_EQ(stored(b, 0).parent, stored(i, 0).parent);
  EXPECT_EQ(stored(b, 0).parent->value, 0x01ababababababab);
}

// A hash of any other type (float, string, bool, nil, ext, empty digest) spoils only its own event.
TEST(KvEventDecoder, BadHashSkipsOnlyItsEvent) {
  const std::vector<Bytes> bad_hashes = {
      Pack().f64(1.0).bytes, Pack().str("abc").bytes, Pack().raw({0xc3}).bytes, Pack().nil().bytes,
      Pack().raw({0xd7, 0x01, 1, 2, 3, 4, 5, 6, 7, 8}).bytes, Pack().bin({}).bytes};
  for (const Bytes& hash : bad_hashes) {
    Pack bad;
    bad.arr(2).str("BlockRemoved").arr(1).append(hash);
    Result r = decode(batchOfEvents({bad.bytes, pack(json::array({"AllBlocksCleared"}))}));
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.batch.events.size(), 1u);
    EXPECT_EQ(r.batch.skipped(KvSkipReason::kBadEvent), 1u);
    EXPECT_EQ(r.batch.skipped_events, 1u);
  }
}

// Older vLLM sends fewer trailing fields: a 5-element BlockStored and a 2-element BlockRemoved take the defaults.
TEST(KvEventDecoder, MissingTrailingFieldsTakeDefaults) {
  Result r = decode(batchOfEvents({pack(storedArray(json::array({1, 2}))), pack(json::array({"BlockRemoved", {3}}))}));
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.batch.events.size(), 2u);
  const KvBlockStored& s = stored(r, 0);
  EXPECT_FALSE(s.parent.has_value());
  EXPECT_EQ(s.block_size, 2u);
  EXPECT_EQ(s.medium, KvMedium::kGpu);
  EXPECT_EQ(s.medium_name, "");
  EXPECT_FALSE(s.lora_id.has_value());
  EXPECT_TRUE(s.extra_keys.empty());
  EXPECT_EQ(s.group_idx, 0u);
  EXPECT_EQ(removed(r, 1).medium, KvMedium::kGpu);
  EXPECT_EQ(removed(r, 1).group_idx, 0u);
}

// Required fields (block_hashes, token_ids, block_size) missing or nil make the event bad, in both forms.
TEST(KvEventDecoder, MissingRequiredFieldsAreBad) {
  json short_stored = json::array({"BlockStored", {1}, nullptr, {1, 2}});
  json nil_size = json::array({"BlockStored", {1}, nullptr, {1, 2}, nullptr});
  json map_no_tokens = {{"type", "BlockStored"}, {"block_hashes", {1}}, {"block_size", 2}};
  json short_removed = json::array({"BlockRemoved"});
  json map_no_hashes = {{"type", "BlockRemoved"}, {"medium", "GPU"}};
  for (const json& event : {short_stored, nil_size, map_no_tokens, short_removed, map_no_hashes}) {
    Result r = decode(batchOf(event));
    ASSERT_TRUE(r.ok) << event.dump();
    EXPECT_TRUE(r.batch.events.empty()) << event.dump();
    EXPECT_EQ(r.batch.skipped(KvSkipReason::kBadEvent), 1u) << event.dump();
  }
}

// The next schema change must not break decoding: extra array elements and unknown map keys, at the batch and
// the event level, are ignored.
TEST(KvEventDecoder, UnknownFieldsAreIgnored) {
  json event = json::array({"BlockStored", {1}, nullptr, {1, 2}, 2, nullptr, "GPU", nullptr, nullptr, 4,
                            "full_attention", nullptr, "future", json::array({1, 2})});
  json map_event = {{"type", "BlockRemoved"}, {"block_hashes", {1}}, {"new_field", {{"a", 1}}}};
  Result a = decode(pack(json::array({1.0, json::array({event, map_event}), 2, "extra", 5})));
  Result m = decode(pack(json{{"ts", 1.0}, {"events", json::array({event})}, {"producer", "sglang"}}));
  ASSERT_TRUE(a.ok && m.ok);
  ASSERT_EQ(a.batch.events.size(), 2u);
  EXPECT_EQ(stored(a, 0).group_idx, 4u);
  EXPECT_EQ(a.batch.data_parallel_rank, 2u);
  EXPECT_EQ(m.batch.events.size(), 1u);
  EXPECT_FALSE(m.batch.data_parallel_rank.has_value());
}

// An unknown event tag skips that event only, counted apart from bad events; the others keep their order.
TEST(KvEventDecoder, UnknownTagsAreSkippedAndCounted) {
  json events = json::array({json::array({"BlockRemoved", {1}}), json::array({"BlockUpdated", {2}, 3}),
                             json{{"type", "Telemetry"}, {"x", 1}}, json::array({"AllBlocksCleared"})});
  Result r = decode(pack(json::array({1.0, events})));
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(r.batch.events.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<KvBlockRemoved>(r.batch.events[0]));
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(r.batch.events[1]));
  EXPECT_EQ(r.batch.skipped(KvSkipReason::kUnknownTag), 2u);
  EXPECT_EQ(r.batch.skipped(KvSkipReason::kBadEvent), 0u);
  EXPECT_EQ(r.batch.skipped_events, 2u);
}

// Events that are not tagged arrays or maps (a number, a string, an empty array, a non-string tag, a map
// without "type") are bad events, not a bad batch.
TEST(KvEventDecoder, UntaggedEventsAreBad) {
  json events = json::array({7, "BlockStored", json::array(), json::array({3, {1}}), json{{"block_hashes", {1}}},
                             json{{"type", 5}}, json::array({"AllBlocksCleared", "extra"})});
  Result r = decode(pack(json::array({1.0, events})));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.batch.events.size(), 1u);
  EXPECT_EQ(r.batch.skipped(KvSkipReason::kBadEvent), 6u);
}

// medium: "GPU", nil and absent are GPU; "CPU" is the CPU tier (any case); another name is kept as kOther; a
// non-string medium is a bad event.
TEST(KvEventDecoder, Medium) {
  auto mediumOf = [](json medium) {
    return decode(batchOf(json::array({"BlockRemoved", {1}, std::move(medium)})));
  };
  Result gpu = mediumOf("GPU"), nil = mediumOf(nullptr), cpu = mediumOf("CPU"), lower = mediumOf("cpu");
  Result disk = mediumOf("DISK"), bad = mediumOf(1);
  EXPECT_EQ(removed(gpu, 0).medium, KvMedium::kGpu);
  EXPECT_EQ(removed(nil, 0).medium, KvMedium::kGpu);
  EXPECT_EQ(removed(cpu, 0).medium, KvMedium::kCpu);
  EXPECT_EQ(removed(lower, 0).medium, KvMedium::kCpu);
  EXPECT_EQ(removed(disk, 0).medium, KvMedium::kOther);
  EXPECT_EQ(removed(disk, 0).medium_name, "DISK");
  EXPECT_TRUE(bad.batch.events.empty());
  json stored_cpu = json::array({"BlockStored", {1}, nullptr, {1, 2}, 2, nullptr, "CPU"});
  EXPECT_EQ(stored(decode(batchOf(stored_cpu)), 0).medium, KvMedium::kCpu);
}

// lora_name and lora_id are kept; a lora_id beyond int64 or a non-string lora_name is a bad event.
TEST(KvEventDecoder, Lora) {
  json event = json::array({"BlockStored", {1}, nullptr, {1, 2}, 2, 12, "GPU", "sql-adapter"});
  Result r = decode(batchOf(event));
  ASSERT_EQ(r.batch.events.size(), 1u);
  EXPECT_EQ(stored(r, 0).lora_id, 12);
  EXPECT_EQ(stored(r, 0).lora_name, "sql-adapter");
  event[5] = -3;
  EXPECT_EQ(stored(decode(batchOf(event)), 0).lora_id, -3);
  event[5] = UINT64_MAX;
  EXPECT_TRUE(decode(batchOf(event)).batch.events.empty());
  event[5] = nullptr;
  event[7] = 5;
  EXPECT_TRUE(decode(batchOf(event)).batch.events.empty());
}

json withExtraKeys(json extra_keys, json hashes = {1, 2}) {
  return json::array({"BlockStored", std::move(hashes), nullptr, {1, 2, 3, 4}, 2, nullptr, "GPU", nullptr,
                      std::move(extra_keys)});
}

// extra_keys give one digest per block: different keys differ, equal keys agree, nil is 0, all nil is empty.
TEST(KvEventDecoder, ExtraKeysDigests) {
  Result r = decode(batchOf(withExtraKeys(json::array({json::array({"mm-hash-a", 0}), nullptr}))));
  Result same = decode(batchOf(withExtraKeys(json::array({json::array({"mm-hash-a", 0}), json::array({"salt"})}))));
  Result other = decode(batchOf(withExtraKeys(json::array({json::array({"mm-hash-b", 0}), json::array({"salt2"})}))));
  Result none = decode(batchOf(withExtraKeys(json::array({nullptr, nullptr}))));
  ASSERT_EQ(stored(r, 0).extra_keys.size(), 2u);
  EXPECT_NE(stored(r, 0).extra_keys[0], 0u);
  EXPECT_EQ(stored(r, 0).extra_keys[1], 0u);
  EXPECT_EQ(stored(r, 0).extra_keys[0], stored(same, 0).extra_keys[0]);
  EXPECT_NE(stored(same, 0).extra_keys[1], 0u);
  EXPECT_NE(stored(same, 0).extra_keys[0], stored(other, 0).extra_keys[0]);
  EXPECT_NE(stored(same, 0).extra_keys[1], stored(other, 0).extra_keys[1]);
  EXPECT_TRUE(stored(none, 0).extra_keys.empty());
}

// Equal keys sent in different msgpack encodings (int8 vs fixint) give the same digest: it is taken over a
// canonical re-encoding, not the wire bytes.
TEST(KvEventDecoder, ExtraKeysDigestIsCanonical) {
  auto eventWith = [](const Bytes& key) {
    Pack p;
    p.arr(9).str("BlockStored").arr(1).uint(1).nil().arr(2).uint(1).uint(2).uint(2).nil().nil().nil();
    p.arr(1).arr(1).append(key);
    return batchOfEvents({p.bytes});
  };
  Result fix = decode(eventWith(Pack().uint(5).bytes));
  Result wide = decode(eventWith(Pack().i8(5).bytes));
  Result six = decode(eventWith(Pack().uint(6).bytes));
  ASSERT_EQ(fix.batch.events.size(), 1u);
  EXPECT_EQ(stored(fix, 0).extra_keys, stored(wide, 0).extra_keys);
  EXPECT_NE(stored(fix, 0).extra_keys, stored(six, 0).extra_keys);
}

// extra_keys that do not line up with the blocks, or are not a list, make the event bad.
TEST(KvEventDecoder, ExtraKeysMustLineUp) {
  EXPECT_TRUE(decode(batchOf(withExtraKeys(json::array({nullptr})))).batch.events.empty());
  EXPECT_TRUE(decode(batchOf(withExtraKeys("salt"))).batch.events.empty());
  EXPECT_EQ(decode(batchOf(withExtraKeys(nullptr))).batch.events.size(), 1u);
}

// group_idx is kept on both kinds; nil is 0; negative or wider than 32 bits is a bad event.
TEST(KvEventDecoder, GroupIdx) {
  json stored_event = json::array({"BlockStored", {1}, nullptr, {1, 2}, 2, nullptr, "GPU", nullptr, nullptr, 3});
  EXPECT_EQ(stored(decode(batchOf(stored_event)), 0).group_idx, 3u);
  EXPECT_EQ(removed(decode(batchOf(json::array({"BlockRemoved", {1}, "GPU", 2}))), 0).group_idx, 2u);
  EXPECT_EQ(removed(decode(batchOf(json::array({"BlockRemoved", {1}, "GPU", nullptr}))), 0).group_idx, 0u);
  for (json bad : {json(-1), json(uint64_t{1} << 32), json("0")}) {
    EXPECT_TRUE(decode(batchOf(json::array({"BlockRemoved", {1}, "GPU", bad}))).batch.events.empty()) << bad;
  }
}

// Token ids are uint32: the full range is accepted, negative, wider or non-integer ids make the event bad, and so
// does a block_size that is not a positive integer.
TEST(KvEventDecoder, TokenIdsAndBlockSize) {
  EXPECT_EQ(stored(decode(batchOf(storedArray({1}, {0, UINT32_MAX}))), 0).token_ids[1], UINT32_MAX);
  for (json tokens : {json::array({1, -1}), json::array({uint64_t{UINT32_MAX} + 1}), json::array({1.5}),
                      json::array({"1"}), json(5)}) {
    EXPECT_TRUE(decode(batchOf(storedArray({1}, tokens))).batch.events.empty()) << tokens;
  }
  for (json size : {json(0), json(-2), json(2.0), json("2")}) {
    json event = storedArray({1});
    event[4] = size;
    EXPECT_TRUE(decode(batchOf(event)).batch.events.empty()) << size;
  }
}

// data_parallel_rank present (both forms), nil or absent; a negative, wide or non-integer rank spoils the batch,
// since its events could be charged to the wrong pod.
TEST(KvEventDecoder, DataParallelRank) {
  json events = json::array({json::array({"AllBlocksCleared"})});
  EXPECT_EQ(decode(pack(json::array({1.0, events, 7}))).batch.data_parallel_rank, 7u);
  EXPECT_EQ(decode(pack(json{{"ts", 1.0}, {"events", events}, {"data_parallel_rank", 5}}))
                .batch.data_parallel_rank, 5u);
  EXPECT_FALSE(decode(pack(json::array({1.0, events, nullptr}))).batch.data_parallel_rank.has_value());
  EXPECT_FALSE(decode(pack(json::array({1.0, events}))).batch.data_parallel_rank.has_value());
  EXPECT_TRUE(decode(pack(json{{"ts", 1.0}, {"events", events}, {"data_parallel_rank", nullptr}})).ok);
  for (json bad : {json(-1), json(uint64_t{1} << 32), json("0"), json(1.0)}) {
    Result r = decode(pack(json::array({1.0, events, bad})));
    EXPECT_FALSE(r.ok) << bad;
    EXPECT_EQ(r.error, kKvErrorBadRank) << bad;
  }
}

// Payloads that are not batches fail as a whole with not_a_batch (or truncated when empty), never crash.
TEST(KvEventDecoder, NonBatchPayloads) {
  const std::vector<json> not_batches = {
      "hello", 42, json::array(), json::array({1.0}), nullptr, json::object(), json{{"ts", 1.0}},
      json{{"events", json::array()}}, json::array({"1.0", json::array()}), json::array({1.0, 5}),
      json::array({"BlockRemoved", {1}}), json{{"ts", 1.0}, {"events", json::object()}}};
  for (const json& j : not_batches) {
    Result r = decode(pack(j));
    EXPECT_FALSE(r.ok) << j.dump();
    EXPECT_EQ(r.error, kKvErrorNotABatch) << j.dump();
  }
  EXPECT_EQ(decode({}).error, kKvErrorTruncated);
}

// Every proper prefix of valid messages (both simulator encodings and a batch with digests and extra keys) fails
// cleanly as truncated.
TEST(KvEventDecoder, EveryPrefixIsTruncated) {
  Bytes digest(32, 0x5a);
  json rich = json::array({1.0, json::array({withExtraKeys(json::array({json::array({"a", 1.5}), nullptr})),
                                             json::array({"BlockRemoved", json::array({json::binary(digest)})})}),
                           1});
  for (const Bytes& whole : {kSimArray, kSimMap, pack(rich)}) {
    ASSERT_TRUE(decode(whole).ok);
    for (size_t n = 0; n < whole.size(); ++n) {
      Result r = decode(Bytes(whole.begin(), whole.begin() + static_cast<ptrdiff_t>(n)));
      EXPECT_FALSE(r.ok) << n;
      EXPECT_EQ(r.error, kKvErrorTruncated) << n;
      EXPECT_TRUE(r.batch.events.empty());
    }
  }
}

// Bytes after the batch mean the frame is not what vLLM sends: refused.
TEST(KvEventDecoder, TrailingBytesAreRefused) {
  Bytes bytes = kSimArray;
  bytes.push_back(0xc0);
  EXPECT_EQ(decode(bytes).error, kKvErrorTrailingBytes);
}

// 100,000 nested arrays are refused by the pre-scan quickly, without recursing (no stack overflow).
TEST(KvEventDecoder, DeepNestingIsRefusedQuickly) {
  Bytes deep(100'000, 0x91);
  deep.push_back(0xc0);
  const auto start = std::chrono::steady_clock::now();
  Result r = decode(deep);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(r.error, kKvErrorTooDeep);
  Pack maps;
  for (int i = 0; i < 100'000; ++i) maps.map(1).str("k");
  maps.nil();
  EXPECT_EQ(decode(maps.bytes).error, kKvErrorTooDeep);
}

// Nesting up to kMaxKvEventDepth is accepted (extra keys may hold tuples); one level more is refused.
TEST(KvEventDecoder, DepthLimitIsExact) {
  auto nestedKeys = [](size_t depth) {  // batch, events, event, extra_keys: 4 levels before the entry
    Pack entry;
    for (size_t i = 0; i < depth - 4; ++i) entry.arr(1);
    entry.uint(1);
    Pack p;
    p.arr(9).str("BlockStored").arr(1).uint(1).nil().arr(2).uint(1).uint(2).uint(2).nil().nil().nil();
    p.arr(1).append(entry.bytes);
    return batchOfEvents({p.bytes});
  };
  Result at_limit = decode(nestedKeys(kMaxKvEventDepth));
  ASSERT_TRUE(at_limit.ok) << at_limit.error;
  EXPECT_EQ(at_limit.batch.events.size(), 1u);
  EXPECT_EQ(decode(nestedKeys(kMaxKvEventDepth + 1)).error, kKvErrorTooDeep);
}

// Declared lengths far beyond the payload (4 GiB strings, binaries, extensions, arrays and maps) are refused as
// truncated before anything is allocated for them.
TEST(KvEventDecoder, AbsurdDeclaredLengths) {
  const std::vector<Bytes> absurd = {
      {0xdb, 0xff, 0xff, 0xff, 0xff, 'a'},        // str32
      {0xc6, 0xff, 0xff, 0xff, 0xff, 0},          // bin32
      {0xc9, 0xff, 0xff, 0xff, 0xff, 1, 0},       // ext32
      {0xdd, 0xff, 0xff, 0xff, 0xff, 0xc0},       // array32
      {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'k'},  // map32
      {0xdc, 0xff, 0xff}, {0xde, 0x00, 0x02, 0xc0, 0xc0, 0xc0}};
  for (const Bytes& value : absurd) {
    EXPECT_EQ(decode(value).error, kKvErrorTruncated);
    Pack inside;  // the same value as the last field of an event
    inside.arr(2).f64(1.0).arr(1).arr(5).str("BlockStored").arr(0).nil().arr(0).append(value);
    EXPECT_EQ(decode(inside.bytes).error, kKvErrorTruncated);
  }
}

// Bytes that are not msgpack (the reserved 0xc1) and map keys that are not strings fail as bad_msgpack.
TEST(KvEventDecoder, MalformedMsgpack) {
  EXPECT_EQ(decode({0x92, 0xc1, 0x90}).error, kKvErrorBadMsgpack);
  Pack int_key;
  int_key.map(2).uint(1).f64(1.0).str("events").arr(0);
  EXPECT_EQ(decode(int_key.bytes).error, kKvErrorBadMsgpack);
}

// Payloads over the byte cap, or with more values than kMaxKvEventValues, are refused before decoding.
TEST(KvEventDecoder, SizeCaps) {
  Bytes big = kSimArray;
  big.resize(kMaxKvEventPayloadBytes + 1, 0xc0);
  EXPECT_EQ(decode(big).error, kKvErrorTooLarge);
  Pack many;
  many.arr(2).f64(1.0).arr(static_cast<uint32_t>(kMaxKvEventValues));
  many.bytes.resize(many.bytes.size() + kMaxKvEventValues, 0xc0);
  EXPECT_EQ(decode(many.bytes).error, kKvErrorTooLarge);
}

// An event with more than kMaxKvTokensPerEvent tokens is skipped and counted; the rest of the batch is kept.
TEST(KvEventDecoder, TooManyTokensSkipsTheEvent) {
  Pack p;
  p.arr(5).str("BlockStored").arr(1).uint(1).nil().arr(static_cast<uint32_t>(kMaxKvTokensPerEvent + 1));
  p.bytes.resize(p.bytes.size() + kMaxKvTokensPerEvent + 1, 0x01);
  p.uint(16);
  Result r = decode(batchOfEvents({p.bytes, pack(json::array({"AllBlocksCleared"}))}));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.batch.events.size(), 1u);
  EXPECT_EQ(r.batch.skipped(KvSkipReason::kTooManyTokens), 1u);
}

// Events past kMaxKvEventsPerBatch are counted, not decoded; the first ones are kept.
TEST(KvEventDecoder, TooManyEventsKeepsTheFirst) {
  const Bytes cleared = pack(json::array({"AllBlocksCleared"}));
  Pack p;
  p.arr(2).f64(1.0).arr(static_cast<uint32_t>(kMaxKvEventsPerBatch + 5));
  for (size_t i = 0; i < kMaxKvEventsPerBatch + 5; ++i) p.append(cleared);
  Result r = decode(p.bytes);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.batch.events.size(), kMaxKvEventsPerBatch);
  EXPECT_EQ(r.batch.skipped(KvSkipReason::kTooManyEvents), 5u);
  EXPECT_EQ(r.batch.skipped_events, 5u);
}

// A failed decode leaves the output empty, even when it held an earlier batch: nothing half-decoded leaks out.
TEST(KvEventDecoder, FailureClearsTheOutput) {
  KvEventBatch batch;
  std::string error;
  ASSERT_TRUE(decodeKvEventBatch(kSimArray, batch, error));
  Bytes bad = kSimArray;
  bad.back() = 0xff;  // rank -1
  EXPECT_FALSE(decodeKvEventBatch(bad, batch, error));
  EXPECT_EQ(error, kKvErrorBadRank);
  EXPECT_TRUE(batch.events.empty());
  EXPECT_FALSE(batch.data_parallel_rank.has_value());
}

// Seeded random corruption of valid payloads never crashes; each result is a decoded batch or a known code.
TEST(KvEventDecoder, RandomCorruptionFailsCleanly) {
  std::mt19937 rng(20260117);
  size_t failures = 0;
  for (const Bytes& whole : {kSimArray, kSimMap}) {
    for (int round = 0; round < 5000; ++round) {
      Bytes b = whole;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) b[rng() % b.size()] = static_cast<uint8_t>(rng());
      if (rng() % 4 == 0) b.resize(rng() % b.size());
      Result r = decode(b);
      if (r.ok) continue;
      ++failures;
      EXPECT_NE(std::find(kKvErrorCodes.begin(), kKvErrorCodes.end(), r.error), kKvErrorCodes.end()) << r.error;
    }
  }
  EXPECT_GT(failures, 0u);
}

// Skip reasons have stable metric label names.
TEST(KvEventDecoder, SkipReasonNames) {
  EXPECT_EQ(kvSkipReasonName(KvSkipReason::kUnknownTag), "unknown_tag");
  EXPECT_EQ(kvSkipReasonName(KvSkipReason::kBadEvent), "bad_event");
  EXPECT_EQ(kvSkipReasonName(KvSkipReason::kTooManyTokens), "too_many_tokens");
  EXPECT_EQ(kvSkipReasonName(KvSkipReason::kTooManyEvents), "too_many_events");
}

// ---- Frames ----

// Sequences are 8-byte big-endian and round-trip, -1 (the replay end) included; other frame sizes are refused.
TEST(KvEventFrames, Sequence) {
  EXPECT_EQ(encodeKvSequence(0x0102030405060708), (std::array<uint8_t, 8>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(encodeKvSequence(kKvReplayEndSequence), (std::array<uint8_t, 8>{255, 255, 255, 255, 255, 255, 255, 255}));
  for (int64_t s : {int64_t{0}, int64_t{1}, int64_t{1} << 40, int64_t{-1}, INT64_MAX}) {
    auto bytes = encodeKvSequence(s);
    EXPECT_EQ(decodeKvSequence(bytes), s);
  }
  const Bytes seven(7, 0);
  EXPECT_FALSE(decodeKvSequence(seven).has_value());
  EXPECT_FALSE(decodeKvSequence({}).has_value());
}

// A PUB message is [topic, sequence, payload] with a non-negative sequence; any other shape is refused.
TEST(KvEventFrames, PublishedMessage) {
  const Bytes topic = {'k', 'v'}, payload = {0x90};
  const auto seq = encodeKvSequence(41), minus = encodeKvSequence(-1);
  std::vector<std::span<const uint8_t>> frames = {topic, seq, payload};
  auto m = splitKvEventMessage(frames);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->sequence, 41);
  EXPECT_EQ(m->payload.data(), payload.data());
  EXPECT_FALSE(splitKvEventMessage(std::span(frames).first(2)).has_value());
  frames[1] = minus;
  EXPECT_FALSE(splitKvEventMessage(frames).has_value());
  frames[1] = std::span(seq).first(4);
  EXPECT_FALSE(splitKvEventMessage(frames).has_value());
}

// A replay reply is [empty, sequence, payload]; sequence -1 ends the replay; a non-empty delimiter or a
// sequence below -1 is refused.
TEST(KvEventFrames, ReplayReply) {
  const Bytes empty, payload = {0x90}, topic = {'x'};
  const auto seq = encodeKvSequence(7), end = encodeKvSequence(kKvReplayEndSequence), bad = encodeKvSequence(-2);
  std::vector<std::span<const uint8_t>> frames = {empty, seq, payload};
  auto m = splitKvReplayReply(frames);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->sequence, 7);
  frames = {empty, end, empty};
  EXPECT_EQ(splitKvReplayReply(frames)->sequence, kKvReplayEndSequence);
  frames = {topic, seq, payload};
  EXPECT_FALSE(splitKvReplayReply(frames).has_value());
  frames = {empty, bad, payload};
  EXPECT_FALSE(splitKvReplayReply(frames).has_value());
}


// A LoRA adapter's own key (its name; older vLLM: its id) leads every block's extra keys: it is left out of the
// digest (the index keeps the adapter's blocks apart by name, where requests naming it find them), so an adapter's
// plain blocks have no extra keys and its salted first block has exactly the digest a request with that salt gets.
TEST(KvEventDecoder, LoraKeyIsLeftOutOfTheExtraKeysDigest) {
  json event = withExtraKeys(json::array({json::array({"sql-adapter", "tenant-a"}), json::array({"sql-adapter"})}));
  event[7] = "sql-adapter";
  Result r = decode(batchOf(event));
  ASSERT_EQ(stored(r, 0).extra_keys.size(), 2u);
  EXPECT_EQ(stored(r, 0).extra_keys[0], cacheSaltDigest("tenant-a"));
  EXPECT_EQ(stored(r, 0).extra_keys[1], 0u);
  json plain = withExtraKeys(json::array({json::array({"sql-adapter"}), json::array({"sql-adapter"})}));
  plain[7] = "sql-adapter";
  EXPECT_TRUE(stored(decode(batchOf(plain)), 0).extra_keys.empty());
  json by_id = withExtraKeys(json::array({json::array({12, "tenant-a"}), json::array({12})}));
  by_id[5] = 12;
  EXPECT_EQ(stored(decode(batchOf(by_id)), 0).extra_keys[0], cacheSaltDigest("tenant-a"));
  // Without a LoRA on the event, a leading string is a key like any other.
  Result other = decode(batchOf(withExtraKeys(json::array({json::array({"sql-adapter", "tenant-a"}), nullptr}))));
  EXPECT_NE(stored(other, 0).extra_keys[0], cacheSaltDigest("tenant-a"));
  EXPECT_EQ(stored(decode(batchOf(withExtraKeys(json::array({json::array({"tenant-a"}), nullptr})))), 0).extra_keys[0],
            cacheSaltDigest("tenant-a"));
  EXPECT_EQ(cacheSaltDigest(""), 0u);
}
}  // namespace
}  // namespace prefixgate::engine
