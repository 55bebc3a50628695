#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine_sim/metrics_text.h"
#include "engine_sim/openai_json.h"
#include "engine_sim/request_log.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Ensures histogram buckets are counted per bound, with +Inf catching the rest.
TEST(Metrics, HistogramBuckets) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);
  h.observe(0.5);
  h.observe(3.0);
  EXPECT_EQ(h.bucketCounts(), (std::vector<uint64_t>{2, 1, 1}));
  EXPECT_EQ(h.count(), 4u);
  EXPECT_DOUBLE_EQ(h.sum(), 3.65);
}

// Ensures /metrics uses vLLM's names, types and labels, including cumulative histogram buckets.
TEST(Metrics, RendersVllmSeries) {
  MetricsSnapshot snapshot;
  snapshot.num_requests_running = 3;
  snapshot.num_requests_waiting = 2;
  snapshot.kv_cache_usage = 0.25;
  snapshot.counters.prefix_cache_queries = 100;
  snapshot.counters.prefix_cache_hits = 40;
  snapshot.counters.prompt_tokens = 100;
  snapshot.counters.generation_tokens = 7;
  snapshot.num_gpu_blocks = 25000;
  EngineHistograms histograms;
  histograms.time_to_first_token.observe(0.03);
  std::string text = renderMetrics(snapshot, histograms, "sim-model");
  const std::string labels = R"({model_name="sim-model",engine="0"})";
  EXPECT_TRUE(contains(text, "# TYPE vllm:num_requests_running gauge\n"));
  EXPECT_TRUE(contains(text, "vllm:num_requests_running" + labels + " 3\n"));
  EXPECT_TRUE(contains(text, "vllm:num_requests_waiting" + labels + " 2\n"));
  EXPECT_TRUE(contains(text, "vllm:kv_cache_usage_perc" + labels + " 0.25\n"));
  EXPECT_TRUE(contains(text, "# TYPE vllm:prefix_cache_queries counter\n"));
  EXPECT_TRUE(contains(text, "vllm:prefix_cache_queries_total" + labels + " 100\n"));
  EXPECT_TRUE(contains(text, "vllm:prefix_cache_hits_total" + labels + " 40\n"));
  EXPECT_TRUE(contains(text, "vllm:prompt_tokens_total" + labels + " 100\n"));
  EXPECT_TRUE(contains(text, "vllm:generation_tokens_total" + labels + " 7\n"));
  EXPECT_TRUE(contains(text, "vllm:num_preemptions_total" + labels + " 0\n"));
  EXPECT_TRUE(contains(text, "# TYPE vllm:time_to_first_token_seconds histogram\n"));
  const std::string bucket = R"(vllm:time_to_first_token_seconds_bucket{model_name="sim-model",engine="0",le=)";
  EXPECT_TRUE(contains(text, bucket + R"("0.02"} 0)"));
  EXPECT_TRUE(contains(text, bucket + R"("0.04"} 1)"));
  EXPECT_TRUE(contains(text, bucket + R"("+Inf"} 1)"));
  EXPECT_TRUE(contains(text, "vllm:time_to_first_token_seconds_count" + labels + " 1\n"));
  EXPECT_TRUE(contains(text, "vllm:e2e_request_latency_seconds_sum" + labels + " 0\n"));
  EXPECT_TRUE(contains(
      text,
      R"(vllm:cache_config_info{block_size="16",num_gpu_blocks="25000",enable_prefix_caching="True",engine="0"} 1)"));
}

// Ensures label values are escaped.
TEST(Metrics, EscapesModelName) {
  std::string text = renderMetrics(MetricsSnapshot{}, EngineHistograms{}, "a\"b");
  EXPECT_TRUE(contains(text, R"(model_name="a\"b")"));
}

// Ensures a chat completion and its chunks have OpenAI's shape, with cached tokens in usage.
TEST(OpenAiJson, ChatShapes) {
  CompletionMeta meta{Endpoint::kChat, "chatcmpl-1", 1700000000, "m"};
  json whole = completionResponse(meta, "hello there", "length", Usage{10, 2, 8});
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hello there");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["total_tokens"], 12);
  EXPECT_EQ(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
  json first = tokenChunk(meta, "hello", true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "hello");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(tokenChunk(meta, " there", false)["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(finishChunk(meta, "stop")["choices"][0]["finish_reason"], "stop");
  json usage = usageChunk(meta, Usage{10, 2, 8});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2);
  EXPECT_EQ(sseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

// Ensures text completions carry choices[].text and object text_completion.
TEST(OpenAiJson, CompletionShapes) {
  CompletionMeta meta{Endpoint::kCompletion, "cmpl-1", 1700000000, "m"};
  json whole = completionResponse(meta, "abc", "stop", Usage{1, 1, 0});
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "abc");
  json chunk = tokenChunk(meta, "abc", true);
  EXPECT_EQ(chunk["object"], "text_completion");
  EXPECT_EQ(chunk["choices"][0]["text"], "abc");
  json embeddings = embeddingsResponse("m", {{0.5f, 0.5f}}, 3);
  EXPECT_EQ(embeddings["data"][0]["object"], "embedding");
  EXPECT_EQ(embeddings["usage"]["prompt_tokens"], 3);
}

// Ensures the request log keeps the newest records, oldest first, and a session's record outlives its eviction.
TEST(RequestLog, KeepsNewestRecords) {
  RequestLog log(2);
  RequestRecord record;
  record.path = "/v1/completions";
  record.headers["x-test"] = "1";
  auto first = log.add(record);
  log.add(record);
  auto third = log.add(record);
  EXPECT_EQ(log.size(), 2u);
  first->cancelled = true;  // still safe to write through after eviction
  third->completed = true;
  json list = log.toJson();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["id"], 2);
  EXPECT_EQ(list[1]["id"], 3);
  EXPECT_EQ(list[1]["completed"], true);
  EXPECT_EQ(list[1]["headers"]["x-test"], "1");
  log.clear();
  EXPECT_TRUE(log.toJson().empty());
}

}  // namespace
}  // namespace prefixgate::sim
