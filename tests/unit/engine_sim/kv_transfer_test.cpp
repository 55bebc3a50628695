// The prefill/decode hand-off at the HTTP edge (vLLM's NixlConnector): which kv_transfer_params a request may
// carry (a 400 in the dialect's shape otherwise), the kv_transfer_params a prefill leg answers with, --role and
// --kv-transfer-ms-per-1k-tokens validation, GET /sim/info, and the transfer's simulated time.
#include "engine_sim/kv_transfer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine_sim/dialect.h"
#include "engine_sim/request_handlers.h"
#include "engine_sim/timing_model.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

// 40 prompt tokens (160 bytes in pieces of 4): three blocks of 16.
constexpr size_t kPromptBytes = 160;

Parsed<CompletionRequest> parseWith(const SimConfig& config, const json& kv_transfer_params) {
  json body{{"model", "sim-model"}, {"prompt", std::string(kPromptBytes, 'p')}, {"max_tokens", 1}};
  body["kv_transfer_params"] = kv_transfer_params;
  return parseCompletionRequest(config, Endpoint::kCompletion, body.dump());
}

Parsed<CompletionRequest> parse(const json& kv_transfer_params) { return parseWith(SimConfig{}, kv_transfer_params); }

json proxyPrefillParams() {
  return json{{"do_remote_decode", true}, {"do_remote_prefill", false}, {"remote_engine_id", nullptr},
              {"remote_block_ids", nullptr}, {"remote_host", nullptr}, {"remote_port", nullptr},
              {"aborted_request", json::array()}};
}

json decodeParams() {
  return json{{"do_remote_prefill", true},     {"do_remote_decode", false},   {"remote_block_ids", {4, 5, 6}},
              {"remote_engine_id", "pod-a"},   {"remote_request_id", "cmpl-1"}, {"remote_host", "10.0.0.1"},
              {"remote_port", 5600},           {"tp_size", 1}};
}

// Ensures the disaggregation proxy's prefill leg (nulls for the remote fields, unknown keys) is a prefill leg, a
// prefill leg's own answer passed on is a decode leg, and no kv_transfer_params (or null) is aggregated.
TEST(KvTransferParams, ReadsTheLegs) {
  auto prefill = parse(proxyPrefillParams());
  ASSERT_TRUE(prefill.ok()) << prefill.error;
  EXPECT_TRUE(prefill.request.kv_transfer.present);
  EXPECT_EQ(prefill.request.kv_transfer.leg, KvTransfer::kSend);
  auto decode = parse(decodeParams());
  ASSERT_TRUE(decode.ok()) << decode.error;
  EXPECT_EQ(decode.request.kv_transfer.leg, KvTransfer::kReceive);
  EXPECT_EQ(decode.request.kv_transfer.remote_blocks, 3u);
  auto none = parse(nullptr);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.request.kv_transfer.present);
  EXPECT_EQ(none.request.kv_transfer.leg, KvTransfer::kNone);
  auto neither = parse(json{{"do_remote_decode", false}});
  ASSERT_TRUE(neither.ok());
  EXPECT_TRUE(neither.request.kv_transfer.present);
  EXPECT_EQ(neither.request.kv_transfer.leg, KvTransfer::kNone);
}

// Ensures malformed kv_transfer_params get a 400 naming the field: not an object, wrong types, both legs at once,
// a decode leg without its remote fields or with another prompt's block count.
TEST(KvTransferParams, RefusesMalformedParams) {
  auto with = [](const char* key, json value) {
    json params = decodeParams();
    params[key] = std::move(value);
    return params;
  };
  auto without = [](const char* key) {
    json params = decodeParams();
    params.erase(key);
    return params;
  };
  std::vector<std::pair<json, std::string>> cases = {
      {5, "must be an object"},
      {json::array(), "must be an object"},
      {"do_remote_decode", "must be an object"},
      {json{{"do_remote_decode", "yes"}}, "do_remote_decode' must be a boolean"},
      {with("do_remote_prefill", 1), "do_remote_prefill' must be a boolean"},
      {with("remote_block_ids", "4,5,6"), "remote_block_ids' must be a list"},
      {with("remote_block_ids", json{4, -5, 6}), "remote_block_ids' must be a list"},
      {with("remote_block_ids", json{4, "5", 6}), "remote_block_ids' must be a list"},
      {with("remote_engine_id", 3), "remote_engine_id' must be a string"},
      {with("remote_request_id", json::object()), "remote_request_id' must be a string"},
      {with("remote_host", false), "remote_host' must be a string"},
      {with("remote_port", "5600"), "remote_port' must be a port"},
      {with("remote_port", 70000), "remote_port' must be a port"},
      {with("tp_size", 0), "tp_size' must be a positive integer"},
      {with("do_remote_decode", true), "both"},
      {without("remote_host"), "remote_host' is required"},
      {with("remote_request_id", nullptr), "remote_request_id' is required"},
      {with("remote_block_ids", json{4, 5}), "has 2 blocks, but this prompt of 40 tokens fills 3"},
  };
  for (const auto& [params, message] : cases) {
    auto parsed = parse(params);
    EXPECT_EQ(parsed.status, 400) << params.dump();
    EXPECT_NE(parsed.error.find(message), std::string::npos) << params.dump() << ": " << parsed.error;
  }
  // The dialect's error shape carries it.
  json error = json::parse(makeDialect(SimConfig{})->error(400, parse(5).error).body);
  EXPECT_EQ(error["error"]["message"], "'kv_transfer_params' must be an object");
  EXPECT_EQ(error["error"]["code"], 400);
}

// Ensures the slots model, which has no KV connector, refuses a hand-off; other dialects ignore the field as
// their engines do.
TEST(KvTransferParams, SlotsRefuseAndOtherDialectsIgnore) {
  SimConfig slots;
  slots.kv_cache_model = "slots";
  EXPECT_EQ(parseWith(slots, proxyPrefillParams()).status, 400);
  EXPECT_NE(parseWith(slots, decodeParams()).error.find("--kv-cache-model slots"), std::string::npos);
  EXPECT_TRUE(parseWith(slots, json{{"do_remote_decode", false}}).ok());
  SimConfig sglang;
  sglang.engine_dialect = "sglang";
  auto ignored = parseWith(sglang, 5);
  ASSERT_TRUE(ignored.ok()) << ignored.error;
  EXPECT_FALSE(ignored.request.kv_transfer.present);
}

// Ensures a prefill leg's answer has exactly NixlConnector request_finished's keys, with its types.
TEST(KvTransferParams, PrefillLegAnswerHasNixlKeysAndTypes) {
  std::vector<uint32_t> blocks{7, 8, 9};
  json params = prefillLegParams(KvOrigin{"pod-a", "10.1.2.3", 8001}, "cmpl-abc", blocks);
  EXPECT_EQ(params, (json{{"do_remote_prefill", true},
                          {"do_remote_decode", false},
                          {"remote_block_ids", {7, 8, 9}},
                          {"remote_engine_id", "pod-a"},
                          {"remote_request_id", "cmpl-abc"},
                          {"remote_host", "10.1.2.3"},
                          {"remote_port", 8001},
                          {"tp_size", 1}}));
  EXPECT_TRUE(params["remote_port"].is_number_integer());
  EXPECT_TRUE(params["remote_block_ids"][0].is_number_integer());
  // Passed back as is, it is a decode leg of a prompt of three blocks.
  auto decode = parse(params);
  ASSERT_TRUE(decode.ok()) << decode.error;
  EXPECT_EQ(decode.request.kv_transfer.leg, KvTransfer::kReceive);
  EXPECT_STREQ(kvRoleLeg(KvTransfer::kSend), "prefill");
  EXPECT_STREQ(kvRoleLeg(KvTransfer::kReceive), "decode");
  EXPECT_STREQ(kvRoleLeg(KvTransfer::kNone), "");
}

// Ensures vLLM's response body carries "kv_transfer_params" only for a request that sent them.
TEST(KvTransferParams, ResponseBodyCarriesTheParams) {
  auto dialect = makeDialect(SimConfig{});
  CompletionMeta meta{Endpoint::kCompletion, "cmpl-1", 1, "sim-model"};
  Outcome outcome;
  EXPECT_FALSE(json::parse(dialect->completionBody(meta, " ab", "length", outcome)).contains("kv_transfer_params"));
  outcome.kv_transfer_params = nullptr;
  EXPECT_TRUE(json::parse(dialect->completionBody(meta, " ab", "length", outcome))["kv_transfer_params"].is_null());
  outcome.kv_transfer_params = json{{"do_remote_prefill", true}};
  EXPECT_EQ(json::parse(dialect->completionBody(meta, " ab", "length", outcome))["kv_transfer_params"],
            *outcome.kv_transfer_params);
}

// Ensures --role and --kv-transfer-ms-per-1k-tokens are validated: an unknown role, a hand-off role without the
// paged model or vLLM's dialect, a negative transfer rate.
TEST(KvTransferConfig, ValidatesRole) {
  SimConfig config;
  for (const char* role : {"prefill", "decode", "both"}) {
    config.role = role;
    EXPECT_EQ(validateConfig(config), "") << role;
  }
  config.role = "encode";
  EXPECT_NE(validateConfig(config).find("--role: 'encode'"), std::string::npos);
  config.role = "prefill";
  config.kv_cache_model = "slots";
  EXPECT_NE(validateConfig(config).find("--kv-cache-model paged"), std::string::npos);
  config.kv_cache_model = "paged";
  config.engine_dialect = "sglang";
  EXPECT_NE(validateConfig(config).find("--engine-dialect vllm"), std::string::npos);
  config.engine_dialect = "vllm";
  config.kv_transfer_ms_per_1k_tokens = -1;
  EXPECT_NE(validateConfig(config).find("--kv-transfer-ms-per-1k-tokens"), std::string::npos);
}

// Ensures GET /sim/info shows the role and the engine id (the pod's name unless --engine-id is set).
TEST(KvTransferConfig, SimInfoShowsRole) {
  SimConfig config;
  config.name = "pod-d";
  config.role = "decode";
  json info = json::parse(handleSimInfo(config).body);
  EXPECT_EQ(info["role"], "decode");
  EXPECT_EQ(info["engine_id"], "pod-d");
  config.engine_id = "engine-7";
  EXPECT_EQ(json::parse(handleSimInfo(config).body)["engine_id"], "engine-7");
}

// Ensures the transfer time is kv_transfer_ms_per_1k_tokens per 1,000 tokens, a token standing for 1/k real ones.
TEST(KvTransferTiming, TransferMillisecondsFollowTokensAndTokenScale) {
  TimingConfig timing;
  timing.kv_transfer_ms_per_1k_tokens = 2.0;
  EXPECT_DOUBLE_EQ(kvTransferMilliseconds(timing, 1500), 3.0);
  timing.token_scale = 0.5;
  EXPECT_DOUBLE_EQ(kvTransferMilliseconds(timing, 1500), 6.0);
  timing.time_scale = 0.1;
  EXPECT_EQ(scaledDuration(timing, 6.0), std::chrono::microseconds(600));
}

}  // namespace
}  // namespace prefixgate::sim
