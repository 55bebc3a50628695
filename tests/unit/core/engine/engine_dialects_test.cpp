// The engine dialects' /metrics readings (engine/engine_metrics.h), llama.cpp's /props, and what EngineLoad keeps
// of them. The pages are the engines' own formats: SGLang's from python/sglang/srt/metrics/collector.py
// (prometheus_client text), llama.cpp's from tools/server/server-task.cpp (to_metrics), vLLM's as its tests show.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine_load.h"
#include "engine/engine_metrics.h"

namespace prefixgate::engine {
namespace {

const std::string kSglangPage = R"(# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0"} 3.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0"} 5.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0"} 0.25
# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{engine_type="unified",model_name="qwen",pp_rank="0",tp_rank="0"} 480000.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} 9000.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="qwen"} 6000.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 4.0
)";

const std::string kLlamaCppPage = R"(# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1200
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 4800
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 640
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
)";

const std::string kVllmPage = R"(# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1
vllm:num_requests_waiting{engine="0",model_name="m"} 0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",enable_prefix_caching="True"} 1
)";

// Ensures an SGLang page gives running, waiting, KV usage, the pool's size and the prefix-cache counters.
TEST(EngineDialects, SglangPageGivesEverySignal) {
  const EngineSnapshot s = parseEngineMetrics(EngineKind::kSglang, kSglangPage);
  EXPECT_EQ(s.engine, EngineKind::kSglang);
  EXPECT_EQ(s.known_series, 6u);  // the histogram bucket is not routed on
  EXPECT_TRUE(s.has_running && s.has_waiting && s.has_kv_usage && s.has_kv_capacity && s.has_prefix_cache);
  EXPECT_DOUBLE_EQ(s.running, 3);
  EXPECT_DOUBLE_EQ(s.waiting, 5);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.25);
  EXPECT_DOUBLE_EQ(s.kv_capacity_tokens, 480000);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hits, 6000);
  EXPECT_DOUBLE_EQ(s.prefix_cache_queries, 9000);
}

// Ensures a llama.cpp page gives running (slots processing) and waiting (deferred), and the cache counters with
// queries = cached + computed prompt tokens; it has no KV usage, which stays unknown (never 0 = idle).
TEST(EngineDialects, LlamaCppPageGivesLoadAndLeavesKvUsageUnknown) {
  const EngineSnapshot s = parseEngineMetrics(EngineKind::kLlamaCpp, kLlamaCppPage);
  EXPECT_EQ(s.engine, EngineKind::kLlamaCpp);
  EXPECT_EQ(s.known_series, 4u);
  EXPECT_TRUE(s.has_running && s.has_waiting && s.has_prefix_cache);
  EXPECT_FALSE(s.has_kv_usage);
  EXPECT_FALSE(s.has_kv_capacity);
  EXPECT_DOUBLE_EQ(s.running, 2);
  EXPECT_DOUBLE_EQ(s.waiting, 1);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hits, 4800);
  EXPECT_DOUBLE_EQ(s.prefix_cache_queries, 6000);
  EXPECT_EQ(unreportedSignals(EngineKind::kLlamaCpp), "kv_cache_usage");
}

// Ensures vLLM's KV capacity is num_gpu_blocks x block_size of its cache_config_info.
TEST(EngineDialects, VllmCapacityFromCacheConfig) {
  const EngineSnapshot s = parseEngineMetrics(EngineKind::kVllm, kVllmPage);
  EXPECT_TRUE(s.has_kv_capacity);
  EXPECT_DOUBLE_EQ(s.kv_capacity_tokens, 16000);
  EXPECT_EQ(s.known_series, 4u);
}

// Ensures a page read in the wrong dialect yields no series (the scraper's failure), never zeros that look idle:
// the four llama.cpp pods read as vLLM "scraped fine" with every field null before dialects existed.
// Finite samples whose sum (several engines' series) or product (blocks x block size) passes a double's range are
// no reading: the signal stays unknown instead of an infinite load or capacity (found by prometheus_text_fuzz).
TEST(EngineDialects, TotalsPastADoublesRangeAreUnknownNotInfinite) {
  const std::string page =
      "vllm:num_requests_running{engine=\"0\"} 1e308\nvllm:num_requests_running{engine=\"1\"} 1e308\n"
      "vllm:num_requests_waiting 2\n"
      "vllm:cache_config_info{block_size=\"1e200\",num_gpu_blocks=\"1e200\"} 1\n";
  const EngineSnapshot s = parseEngineMetrics(EngineKind::kVllm, page);
  EXPECT_FALSE(s.has_running);
  EXPECT_TRUE(std::isfinite(s.running));
  EXPECT_TRUE(s.has_waiting);
  EXPECT_DOUBLE_EQ(s.waiting, 2);
  EXPECT_FALSE(s.has_kv_capacity);
  EXPECT_TRUE(std::isfinite(s.kv_capacity_tokens));
}

TEST(EngineDialects, WrongDialectReadsNothing) {
  for (const auto& [kind, page] : {std::pair{EngineKind::kVllm, kLlamaCppPage},
                                   std::pair{EngineKind::kLlamaCpp, kSglangPage},
                                   std::pair{EngineKind::kSglang, kVllmPage}}) {
    const EngineSnapshot s = parseEngineMetrics(kind, page);
    EXPECT_EQ(s.known_series, 0u) << engineKindName(kind);
    EXPECT_FALSE(s.has_running || s.has_waiting || s.has_kv_usage || s.has_prefix_cache);
  }
  EXPECT_EQ(parseEngineMetrics(EngineKind::kAuto, "process_cpu_seconds_total 1\n").known_series, 0u);
  EXPECT_EQ(parseEngineMetrics(EngineKind::kAuto, "").known_series, 0u);
}

// Ensures `auto` recognises each engine from its page, and recogniseEngine names the engine a page belongs to
// (ignoring a name that only appears in a comment or a label).
TEST(EngineDialects, AutoRecognisesEachEngine) {
  EXPECT_EQ(parseEngineMetrics(EngineKind::kAuto, kSglangPage).engine, EngineKind::kSglang);
  EXPECT_EQ(parseEngineMetrics(EngineKind::kAuto, kLlamaCppPage).engine, EngineKind::kLlamaCpp);
  EXPECT_EQ(parseEngineMetrics(EngineKind::kAuto, kVllmPage).engine, EngineKind::kVllm);
  EXPECT_DOUBLE_EQ(parseEngineMetrics(EngineKind::kAuto, kLlamaCppPage).running, 2);
  EXPECT_EQ(recogniseEngine(kLlamaCppPage), EngineKind::kLlamaCpp);
  EXPECT_EQ(recogniseEngine("# HELP vllm:x help\nother{a=\"sglang:y\"} 1\n"), EngineKind::kAuto);
}

// Ensures data-parallel series of one metric sum, and usage fractions average (each engine has its own cache).
TEST(EngineDialects, RanksSumAndUsageAverages) {
  const EngineSnapshot s = parseEngineMetrics(EngineKind::kSglang,
                                              "sglang:num_running_reqs{dp_rank=\"0\"} 2\n"
                                              "sglang:num_running_reqs{dp_rank=\"1\"} 3\n"
                                              "sglang:token_usage{dp_rank=\"0\"} 0.2\n"
                                              "sglang:token_usage{dp_rank=\"1\"} 0.4\n"
                                              "sglang:max_total_num_tokens{dp_rank=\"0\"} 1000\n"
                                              "sglang:max_total_num_tokens{dp_rank=\"1\"} 1000\n");
  EXPECT_DOUBLE_EQ(s.running, 5);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.3);
  EXPECT_DOUBLE_EQ(s.kv_capacity_tokens, 2000);
}

// Ensures llama.cpp's /props gives its slots and each slot's context, and anything else is refused with a reason.
TEST(EngineDialects, LlamaCppPropsStrict) {
  SlotCapacity c;
  std::string error;
  ASSERT_TRUE(parseLlamaCppProps(
      R"({"default_generation_settings":{"params":{"top_k":40},"n_ctx":4096},"total_slots":2,"model_alias":"m"})", c,
      error))
      << error;
  EXPECT_EQ(c.slots, 2u);
  EXPECT_EQ(c.slot_context_tokens, 4096u);
  for (const char* bad : {"", "[]", "not json", R"({"total_slots":2})", R"({"total_slots":0,"default_generation_settings":{"n_ctx":8}})",
                          R"({"total_slots":2,"default_generation_settings":{"n_ctx":-1}})",
                          R"({"total_slots":2.5,"default_generation_settings":{"n_ctx":8}})",
                          R"({"total_slots":"2","default_generation_settings":{"n_ctx":8}})",
                          R"({"total_slots":2,"default_generation_settings":{"n_ctx":99999999999}})"}) {
    error.clear();
    EXPECT_FALSE(parseLlamaCppProps(bad, c, error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

// Ensures EngineLoad counts failed scrapes by reason, takes the KV capacity a page reports (SGLang's pool) or a
// slot engine's slots x context, and keeps a capacity error until the capacity is read.
TEST(EngineDialects, EngineLoadKeepsCapacityAndCountsFailures) {
  EngineLoad load;
  load.publish(parseEngineMetrics(EngineKind::kSglang, kSglangPage));
  EXPECT_EQ(load.kvCapacityTokens(), 480000u);
  load.markScrapeFailed("its /metrics has no sglang: series", ScrapeError::kUnknownSeries);
  load.markScrapeFailed("its /metrics has no sglang: series", ScrapeError::kUnknownSeries);
  load.markScrapeFailed("connect: refused");
  EXPECT_EQ(load.scrapeErrors(ScrapeError::kUnknownSeries), 2u);
  EXPECT_EQ(load.scrapeErrors(ScrapeError::kUnreachable), 1u);
  EXPECT_EQ(load.scrapeErrors(ScrapeError::kStatus), 0u);
  EXPECT_TRUE(load.latest().stale);
  EXPECT_EQ(load.kvCapacityTokens(), 480000u);  // a failed scrape keeps what was known

  EngineLoad llama;
  llama.markCapacityFailed("/props answered 404");
  EXPECT_EQ(llama.capacityError(), "/props answered 404");
  EXPECT_EQ(llama.scrapeErrors(ScrapeError::kProps), 1u);
  llama.publishSlots(2, 4096);
  EXPECT_EQ(llama.slots(), 2u);
  EXPECT_EQ(llama.kvCapacityTokens(), 8192u);
  EXPECT_EQ(llama.capacityError(), "");
  EXPECT_EQ(scrapeErrorLabel(ScrapeError::kUnknownSeries), "unknown_series");
}

// Ensures the dialect names round-trip and a bad one is refused.
TEST(EngineDialects, KindNames) {
  for (EngineKind k : {EngineKind::kAuto, EngineKind::kVllm, EngineKind::kSglang, EngineKind::kLlamaCpp})
    EXPECT_EQ(parseEngineKind(engineKindName(k)), k);
  EXPECT_EQ(parseEngineKind("llama.cpp"), EngineKind::kLlamaCpp);
  EXPECT_EQ(parseEngineKind("VLLM"), std::nullopt);
  EXPECT_EQ(parseEngineKind(""), std::nullopt);
}

}  // namespace
}  // namespace prefixgate::engine
