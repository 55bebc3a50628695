// The prefill/decode legs' bodies and header values: the fields vLLM's disaggregation proxy sets are set, every other
// byte of the client's body is kept, only top-level members are touched, and a prefill pod's answer yields its
// kv_transfer_params only when it is a bounded JSON object.
#include "proxy/pd_protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace prefixgate::proxy::pd {
namespace {

constexpr std::string_view kPrefillParams =
    R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
    R"("remote_block_ids":null,"remote_host":null,"remote_port":null})";

std::string prefillOk(std::string_view body) {
  BodyEdit edit = prefillBody(body);
  EXPECT_TRUE(edit.ok()) << edit.error;
  EXPECT_TRUE(nlohmann::json::accept(edit.body)) << edit.body;
  return edit.body;
}

std::string decodeOk(std::string_view body, std::string_view params) {
  BodyEdit edit = decodeBody(body, params);
  EXPECT_TRUE(edit.ok()) << edit.error;
  EXPECT_TRUE(nlohmann::json::accept(edit.body)) << edit.body;
  return edit.body;
}

// ---- prefillBody ---------------------------------------------------------------------------------------------------

TEST(PdPrefillBody, SetsStreamMaxTokensAndKvTransferParamsAfterTheClientsFields) {
  EXPECT_EQ(prefillOk(R"({"model":"m","prompt":"hi"})"),
            std::string(R"({"model":"m","prompt":"hi","stream":false,"max_tokens":1,)") + std::string(kPrefillParams) +
                "}");
}

TEST(PdPrefillBody, ReplacesStreamMaxTokensAndRemovesStreamOptionsAndMinimums) {
  std::string out = prefillOk(
      R"({"stream":true,"stream_options":{"include_usage":true},"max_tokens":512,"min_tokens":8,)"
      R"("min_completion_tokens":4,"model":"m"})");
  EXPECT_EQ(out, std::string(R"({"model":"m","stream":false,"max_tokens":1,)") + std::string(kPrefillParams) + "}");
}

TEST(PdPrefillBody, SetsMaxCompletionTokensOnlyWhenTheClientGaveIt) {
  auto with = nlohmann::json::parse(prefillOk(R"({"model":"m","max_completion_tokens":300})"));
  EXPECT_EQ(with["max_completion_tokens"], 1);
  EXPECT_EQ(with["max_tokens"], 1);
  auto without = nlohmann::json::parse(prefillOk(R"({"model":"m"})"));
  EXPECT_FALSE(without.contains("max_completion_tokens"));
}

TEST(PdPrefillBody, ReplacesTheClientsKvTransferParams) {
  auto out = nlohmann::json::parse(
      prefillOk(R"({"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.66"},"model":"m"})"));
  EXPECT_EQ(out["kv_transfer_params"],
            nlohmann::json::parse(R"({"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,
                                      "remote_block_ids":null,"remote_host":null,"remote_port":null})"));
}

TEST(PdPrefillBody, KeepsTheClientsOtherFieldsByteForByte) {
  std::string out = prefillOk(
      "{ \"temperature\" : 1e-1,\n  \"seed\": 12345678901234567890, \"messages\": [ {\"role\":\"user\", "
      "\"content\":\"caf\\u00e9 \\\"q\\\"\"} ],\n  \"stream\": true\n}\n");
  EXPECT_EQ(out,
            "{ \"temperature\" : 1e-1,\n  \"seed\": 12345678901234567890, \"messages\": [ {\"role\":\"user\", "
            "\"content\":\"caf\\u00e9 \\\"q\\\"\"} ],\"stream\":false,\"max_tokens\":1," +
                std::string(kPrefillParams) + "}\n");
}

TEST(PdPrefillBody, LeavesNestedKeysNamedLikeTopLevelFieldsAlone) {
  std::string body =
      R"({"messages":[{"role":"user","content":"x","stream":true,"max_tokens":9}],)"
      R"("response_format":{"kv_transfer_params":{"a":1},"stream_options":{}},"model":"m"})";
  std::string out = prefillOk(body);
  EXPECT_EQ(out, body.substr(0, body.size() - 1) + R"(,"stream":false,"max_tokens":1,)" + std::string(kPrefillParams) +
                     "}");
}

TEST(PdPrefillBody, RemovesEveryCopyOfADuplicatedKey) {
  std::string out = prefillOk(R"({"stream":true,"model":"m","stream":true,"max_tokens":5,"max_tokens":7})");
  EXPECT_EQ(out, std::string(R"({"model":"m","stream":false,"max_tokens":1,)") + std::string(kPrefillParams) + "}");
}

TEST(PdPrefillBody, RecognisesKeysWrittenWithEscapes) {
  // \u0073tream is "stream" to the engine's parser: left in, it would ask the prefill pod for a stream.
  std::string out = prefillOk(R"({"\u0073tream":true,"max\u005ftokens":9,"model":"m"})");
  EXPECT_EQ(out, std::string(R"({"model":"m","stream":false,"max_tokens":1,)") + std::string(kPrefillParams) + "}");
}

TEST(PdPrefillBody, KeepsStringsWithEscapedQuotesAndBracesIntact) {
  std::string body = R"({"prompt":"a \"}\" b \\","stop":["]","\u0022"],"model":"m"})";
  std::string out = prefillOk(body);
  EXPECT_EQ(out.substr(0, body.size() - 1), body.substr(0, body.size() - 1));
}

TEST(PdPrefillBody, WhitespaceVariants) {
  EXPECT_EQ(prefillOk("\n\t{\r\n  \"model\"\t:\t\"m\"  ,  \"stream\"  :  true  \r\n}  "),
            "\n\t{\r\n  \"model\"\t:\t\"m\",\"stream\":false,\"max_tokens\":1," + std::string(kPrefillParams) +
                "  }  ");
  EXPECT_EQ(prefillOk("{ }"), "{\"stream\":false,\"max_tokens\":1," + std::string(kPrefillParams) + "}");
  EXPECT_EQ(prefillOk(R"({"stream":true})"),
            "{\"stream\":false,\"max_tokens\":1," + std::string(kPrefillParams) + "}");
}

TEST(PdPrefillBody, RefusesWhatIsNotOneJsonObject) {
  for (std::string_view bad : {"", "   ", "[1,2]", "null", "\"s\"", "{", "{\"a\":1", "{\"a\" 1}", "{\"a\":}",
                               "{\"a\":1,}", "{\"a\":[}", "{\"a\":{]}", "{\"a\":\"x}", "{} x", "{\"a\":1}}",
                               "{a:1}", "{\"a\":1 \"b\":2}"}) {
    BodyEdit edit = prefillBody(bad);
    EXPECT_FALSE(edit.ok()) << "accepted: " << bad;
    EXPECT_TRUE(edit.body.empty());
  }
}

// ---- decodeBody ----------------------------------------------------------------------------------------------------

TEST(PdDecodeBody, SetsThePrefillPodsParamsAndKeepsEverythingElse) {
  std::string params = R"({"do_remote_prefill":true,"remote_block_ids":[1,2],"remote_port":5600})";
  std::string body = R"({"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":64,)"
                     R"("temperature":1e-1})";
  EXPECT_EQ(decodeOk(body, params), body.substr(0, body.size() - 1) + ",\"kv_transfer_params\":" + params + "}");
}

TEST(PdDecodeBody, ReplacesEveryCopyOfTheClientsKvTransferParams) {
  std::string params = R"({"do_remote_prefill":true})";
  EXPECT_EQ(decodeOk(R"({"kv_transfer_params":{"remote_host":"evil"},"model":"m","kv_transfer_params":null})", params),
            R"({"model":"m","kv_transfer_params":{"do_remote_prefill":true}})");
}

TEST(PdDecodeBody, EmptyParamsOnlyRemoveTheClients) {
  EXPECT_EQ(decodeOk(R"({"model":"m", "kv_transfer_params": {"remote_host":"evil"} })", ""), R"({"model":"m"})");
  EXPECT_EQ(decodeOk(R"({"kv_transfer_params":{}})", ""), "{}");
}

TEST(PdDecodeBody, LeavesNestedKvTransferParamsAlone) {
  std::string body = R"({"metadata":{"kv_transfer_params":{"x":1}},"model":"m"})";
  EXPECT_EQ(decodeOk(body, R"({"a":1})"), body.substr(0, body.size() - 1) + R"(,"kv_transfer_params":{"a":1}})");
}

TEST(PdDecodeBody, RefusesParamsThatAreNotAnObjectAndBodiesThatAreNot) {
  EXPECT_FALSE(decodeBody(R"({"model":"m"})", "[1]").ok());
  EXPECT_FALSE(decodeBody(R"({"model":"m"})", R"({"a":1},"stream":true)").ok());
  EXPECT_FALSE(decodeBody("[]", R"({"a":1})").ok());
}

// ---- extractKvTransferParams ---------------------------------------------------------------------------------------

constexpr size_t kLimit = 4096;

TEST(PdKvTransferParams, ReturnsTheObjectsTextAsSent) {
  std::string params =
      R"({"do_remote_prefill": true, "do_remote_decode": false, "remote_block_ids": [3, 4, 5],)"
      R"( "remote_engine_id": "e-\u00e9", "remote_request_id": "cmpl-1", "remote_host": "10.1.2.3",)"
      R"( "remote_port": 5600, "tp_size": 2})";
  std::string answer = R"({"id":"cmpl-1","choices":[{"text":"a","kv_transfer_params":"nested"}],)"
                       R"("kv_transfer_params": )" + params + R"(, "usage":{"prompt_tokens":3}})";
  KvTransferParams got = extractKvTransferParams(answer, kLimit);
  ASSERT_TRUE(got.present()) << got.absent_reason;
  EXPECT_EQ(got.json, params);
}

TEST(PdKvTransferParams, AbsentWhenMissingNullEmptyOrNotAnObject) {
  for (std::string_view answer : {R"({"id":"x","choices":[{"kv_transfer_params":{"a":1}}]})",
                                  R"({"kv_transfer_params":null})", R"({"kv_transfer_params":{ }})",
                                  R"({"kv_transfer_params":[{"a":1}]})", R"({"kv_transfer_params":"{\"a\":1}"})",
                                  R"({"kv_transfer_params":7})"}) {
    KvTransferParams got = extractKvTransferParams(answer, kLimit);
    EXPECT_FALSE(got.present()) << answer;
    EXPECT_FALSE(got.absent_reason.empty()) << answer;
  }
}

TEST(PdKvTransferParams, NullIsReportedAsNull) {
  // vLLM's response field defaults to None, so a pod whose connector returned no params may write null.
  KvTransferParams got = extractKvTransferParams(R"({"id":"x","kv_transfer_params":null})", kLimit);
  EXPECT_FALSE(got.present());
  EXPECT_NE(got.absent_reason.find("null"), std::string::npos) << got.absent_reason;
}

TEST(PdKvTransferParams, AbsentWhenOverTheLimit) {
  std::string ids = "0";
  for (int i = 1; i < 2000; ++i) ids += "," + std::to_string(i);
  std::string params = R"({"remote_block_ids":[)" + ids + "]}";
  KvTransferParams got = extractKvTransferParams(R"({"kv_transfer_params":)" + params + "}", kLimit);
  EXPECT_FALSE(got.present());
  EXPECT_NE(got.absent_reason.find("over the limit"), std::string::npos) << got.absent_reason;
  EXPECT_TRUE(extractKvTransferParams(R"({"kv_transfer_params":)" + params + "}", params.size()).present());
}

TEST(PdKvTransferParams, AbsentWhenTheObjectIsNotValidJson) {
  // Balanced brackets but not JSON: copied into the decode body it would break it.
  KvTransferParams got = extractKvTransferParams(R"({"kv_transfer_params":{1 2 3}})", kLimit);
  EXPECT_FALSE(got.present());
  EXPECT_NE(got.absent_reason.find("not valid JSON"), std::string::npos) << got.absent_reason;
}

TEST(PdKvTransferParams, AbsentWhenTheAnswerIsNotAnObject) {
  for (std::string_view answer : {"", "[]", "Internal Server Error", R"({"kv_transfer_params":{"a":1})",
                                  R"({"kv_transfer_params":{"a":1}} trailing)"}) {
    KvTransferParams got = extractKvTransferParams(answer, kLimit);
    EXPECT_FALSE(got.present()) << answer;
    EXPECT_FALSE(got.absent_reason.empty());
  }
}

TEST(PdKvTransferParams, TheLastOfDuplicatesCounts) {
  KvTransferParams got =
      extractKvTransferParams(R"({"kv_transfer_params":{"a":1},"\u006bv_transfer_params":{"b":2}})", kLimit);
  ASSERT_TRUE(got.present()) << got.absent_reason;
  EXPECT_EQ(got.json, R"({"b":2})");
}

// ---- Sidecar header ------------------------------------------------------------------------------------------------

TEST(PdSidecar, HostPortValueAsGoJoinHostPortWritesIt) {
  EXPECT_EQ(kPrefillerHostPortHeader, "x-prefiller-host-port");
  EXPECT_EQ(prefillerHostPort("10.0.0.7", 8000), "10.0.0.7:8000");
  EXPECT_EQ(prefillerHostPort("fd00::7", 8000), "[fd00::7]:8000");
  EXPECT_EQ(prefillerHostPort("[fd00::7]", 8000), "[fd00::7]:8000");
  EXPECT_EQ(prefillerHostPort("prefill-0.svc", 65535), "prefill-0.svc:65535");
}

}  // namespace
}  // namespace prefixgate::proxy::pd
