#include "engine_sim/request_handlers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

SimConfig twoModels() {
  SimConfig config;
  config.models = {"alpha", "beta"};
  config.max_tokens_default = 16;
  return config;
}

// Ensures a valid chat request is parsed with its model, prompt, output length and stream options.
TEST(RequestHandlers, ParsesChatRequest) {
  auto parsed = parseCompletionRequest(twoModels(), Endpoint::kChat,
                                       R"({"model": "beta", "messages": [{"role": "user", "content": "hi"}],
                                           "max_completion_tokens": 7, "stream": true,
                                           "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(parsed.ok()) << parsed.error;
  EXPECT_EQ(parsed.request.model, "beta");
  EXPECT_EQ(parsed.request.max_tokens, 7u);
  EXPECT_EQ(parsed.request.finish_reason, "length");
  EXPECT_TRUE(parsed.request.stream);
  EXPECT_TRUE(parsed.request.include_usage);
  EXPECT_EQ(parsed.request.prompt.text, "<|user|>hi<|end|><|assistant|>");
}

// Ensures defaults: the first model when none is named, max_tokens_default tokens ending with "stop".
TEST(RequestHandlers, AppliesDefaults) {
  auto parsed = parseCompletionRequest(twoModels(), Endpoint::kCompletion, R"({"prompt": "abc"})");
  ASSERT_TRUE(parsed.ok()) << parsed.error;
  EXPECT_EQ(parsed.request.model, "alpha");
  EXPECT_EQ(parsed.request.max_tokens, 16u);
  EXPECT_EQ(parsed.request.finish_reason, "stop");
  EXPECT_FALSE(parsed.request.stream);
}

// Ensures an unknown model is a 404 and malformed JSON or fields are 400s.
TEST(RequestHandlers, RejectsBadRequests) {
  SimConfig config = twoModels();
  auto unknown = parseCompletionRequest(config, Endpoint::kCompletion, R"({"model": "gamma", "prompt": "x"})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.error.find("gamma"), std::string::npos);
  EXPECT_EQ(parseCompletionRequest(config, Endpoint::kCompletion, "{not json").status, 400);
  EXPECT_EQ(parseCompletionRequest(config, Endpoint::kCompletion, R"({"prompt": "x", "max_tokens": 0})").status,
            400);
  EXPECT_EQ(parseCompletionRequest(config, Endpoint::kCompletion, R"({"prompt": "x", "stream": "yes"})").status,
            400);
  EXPECT_EQ(parseCompletionRequest(config, Endpoint::kChat, R"({"prompt": "x"})").status, 400);
  EXPECT_EQ(parseCompletionRequest(config, Endpoint::kCompletion, R"({"model": 3, "prompt": "x"})").status, 400);
}

// Ensures prompt + max_tokens beyond max_model_len is refused as vLLM does.
TEST(RequestHandlers, EnforcesMaxModelLen) {
  SimConfig config = twoModels();
  config.max_model_len = 10;
  EXPECT_TRUE(parseCompletionRequest(config, Endpoint::kCompletion, R"({"prompt": [1,2,3], "max_tokens": 7})").ok());
  EXPECT_EQ(parseCompletionRequest(config, Endpoint::kCompletion, R"({"prompt": [1,2,3], "max_tokens": 8})").status,
            400);
}

// Ensures the error body has OpenAI's shape.
TEST(RequestHandlers, ErrorShape) {
  SimpleResponse response = errorResponse(404, "The model `x` does not exist.");
  EXPECT_EQ(response.status, 404);
  json body = json::parse(response.body);
  EXPECT_EQ(body["error"]["message"], "The model `x` does not exist.");
  EXPECT_EQ(body["error"]["type"], "NotFoundError");
  EXPECT_TRUE(body["error"]["param"].is_null());
  EXPECT_EQ(body["error"]["code"], 404);
}

// Ensures /tokenize answers both forms with the engine's own tokenization.
TEST(RequestHandlers, Tokenize) {
  SimConfig config = twoModels();
  json completion = json::parse(handleTokenize(config, R"({"model": "alpha", "prompt": "Hello world!"})").body);
  EXPECT_EQ(completion["count"], 3);
  EXPECT_EQ(completion["max_model_len"], 32768);
  EXPECT_EQ(completion["tokens"].get<std::vector<uint32_t>>(), tokenize("Hello world!"));
  json chat = json::parse(handleTokenize(config, R"({"messages": [{"role": "user", "content": "hi"}],
                                                     "add_generation_prompt": false})")
                              .body);
  EXPECT_EQ(chat["tokens"].get<std::vector<uint32_t>>(),
            (std::vector<uint32_t>{specialTokenId("<|user|>"), tokenId("hi"), specialTokenId("<|end|>")}));
  EXPECT_EQ(handleTokenize(config, R"({"model": "nope", "prompt": "x"})").status, 404);
}

// Ensures /v1/models lists every served model in OpenAI's list shape.
TEST(RequestHandlers, Models) {
  json body = json::parse(handleModels(twoModels(), 1700000000).body);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 2u);
  EXPECT_EQ(body["data"][1]["id"], "beta");
  EXPECT_EQ(body["data"][1]["object"], "model");
}

// Ensures /sim/fault applies only the fields given and rejects bad values without changing anything.
TEST(RequestHandlers, Faults) {
  Faults faults;
  EXPECT_EQ(handleFault(faults, R"({"health_status": 503})").status, 200);
  EXPECT_EQ(faults.health_status, 503);
  EXPECT_EQ(faults.error_status, 0);
  handleFault(faults, R"({"error_status": 500, "stall": true})");
  EXPECT_EQ(faults.error_status, 500);
  EXPECT_TRUE(faults.stall);
  EXPECT_EQ(handleFault(faults, R"({"error_status": 42, "stall": false})").status, 400);
  EXPECT_TRUE(faults.stall);
  EXPECT_EQ(handleFault(faults, "nope").status, 400);
}

// Ensures /sim/fault sets and clears the /tokenize faults (status, delay), reports them, and rejects bad values
// without changing anything.
TEST(RequestHandlers, TokenizeFaults) {
  Faults faults;
  SimpleResponse set = handleFault(faults, R"({"tokenize_status": 503, "tokenize_delay_ms": 250})");
  ASSERT_EQ(set.status, 200) << set.body;
  EXPECT_EQ(faults.tokenize_status, 503);
  EXPECT_EQ(faults.tokenize_delay_ms, 250u);
  EXPECT_EQ(faults.error_status, 0);
  json shown = json::parse(faultsResponse(faults).body);
  EXPECT_EQ(shown["tokenize_status"], 503);
  EXPECT_EQ(shown["tokenize_delay_ms"], 250);
  for (const char* bad : {R"({"tokenize_status": 42})", R"({"tokenize_status": "500"})", R"({"tokenize_delay_ms": -1})",
                          R"({"tokenize_delay_ms": 1.5})", R"({"tokenize_delay_ms": 600001})",
                          R"({"tokenize_status": 0, "tokenize_delay_ms": "slow"})"}) {
    EXPECT_EQ(handleFault(faults, bad).status, 400) << bad;
    EXPECT_EQ(faults.tokenize_status, 503) << bad;
    EXPECT_EQ(faults.tokenize_delay_ms, 250u) << bad;
  }
  ASSERT_EQ(handleFault(faults, R"({"tokenize_status": 0, "tokenize_delay_ms": 0})").status, 200);
  EXPECT_EQ(faults.tokenize_status, 0);
  EXPECT_EQ(faults.tokenize_delay_ms, 0u);
}

// Ensures /sim/cache/match reads the prompt in each accepted form, asks the lookup with its tokens and answers the
// cached prefix with the pod's load; bad bodies are 400s.
TEST(RequestHandlers, CacheMatchAnswersLookup) {
  std::vector<uint32_t> asked;
  auto lookup = [&asked](std::span<const uint32_t> tokens) {
    asked.assign(tokens.begin(), tokens.end());
    return CacheMatch{32, 3, 1, 0.25};
  };
  SimpleResponse chat = handleCacheMatch(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}]})", lookup);
  ASSERT_EQ(chat.status, 200) << chat.body;
  json answer = json::parse(chat.body);
  EXPECT_EQ(answer["cached_tokens"], 32);
  EXPECT_EQ(answer["prompt_tokens"], 4);
  EXPECT_EQ(answer["num_requests_running"], 3);
  EXPECT_EQ(answer["num_requests_waiting"], 1);
  EXPECT_EQ(answer["kv_cache_usage_perc"], 0.25);
  EXPECT_EQ(asked.size(), 4u);
  EXPECT_EQ(handleCacheMatch(R"({"prompt": "abcdefgh"})", lookup).status, 200);
  EXPECT_EQ(asked, tokenize("abcdefgh"));
  EXPECT_EQ(handleCacheMatch(R"({"token_ids": [5, 6, 7]})", lookup).status, 200);
  EXPECT_EQ(asked, (std::vector<uint32_t>{5, 6, 7}));
  EXPECT_EQ(handleCacheMatch(R"({"token_ids": []})", lookup).status, 400);
  EXPECT_EQ(handleCacheMatch(R"({"nothing": 1})", lookup).status, 400);
  EXPECT_EQ(handleCacheMatch("not json", lookup).status, 400);
}

}  // namespace
}  // namespace prefixgate::sim
