#include "engine/engine_metrics.h"
#include "engine/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace prefixgate::engine {
namespace {

// A page as vLLM (prometheus_client) writes it: HELP/TYPE, _total counters with their _created twins,
// histograms, and the cache_config_info info gauge with many labels.
constexpr std::string_view kVllmPage = R"(# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.4242
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.5e+06
vllm:prefix_cache_queries_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.2e+06
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 42.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.25
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="27000",prefix_caching_hash_algo="sha256"} 1.0
)";

// Every sample line of a real-looking page is parsed; comments are not samples and nothing is bad.
TEST(PromText, ParsesARealPage) {
  PromParseStats stats;
  auto samples = parsePromSamples(kVllmPage, &stats);
  EXPECT_EQ(stats.bad_lines, 0u);
  ASSERT_EQ(samples.size(), 12u);
  EXPECT_EQ(samples[1].name, "vllm:num_requests_running");
  EXPECT_EQ(samples[1].labels.size(), 2u);
  EXPECT_EQ(samples[1].labels[1].second, "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_DOUBLE_EQ(samples[1].value, 7);
  EXPECT_DOUBLE_EQ(samples[4].value, 1.5e6);
  EXPECT_EQ(samples[8].labels[1].second, "+Inf");
}

// The value spellings of Go's ParseFloat that Prometheus emits, and optional timestamps in ms.
TEST(PromText, ValuesAndTimestamps) {
  auto samples = parsePromSamples(
      "a NaN\nb +Inf\nc -Inf\nd 1.5e-3\ne -2E+2\nf 17 1700000000123\ng +3\nh inf\ni 0x10\n");
  ASSERT_EQ(samples.size(), 8u);  // "0x10" is not a Prometheus number
  EXPECT_TRUE(std::isnan(samples[0].value));
  EXPECT_TRUE(std::isinf(samples[1].value) && samples[1].value > 0);
  EXPECT_TRUE(std::isinf(samples[2].value) && samples[2].value < 0);
  EXPECT_DOUBLE_EQ(samples[3].value, 0.0015);
  EXPECT_DOUBLE_EQ(samples[4].value, -200);
  EXPECT_TRUE(samples[5].has_timestamp);
  EXPECT_EQ(samples[5].timestamp_ms, 1700000000123);
  EXPECT_FALSE(samples[4].has_timestamp);
  EXPECT_DOUBLE_EQ(samples[6].value, 3);
}

// A float-seconds timestamp beyond int64 milliseconds is not a timestamp: the line is bad, never converted
// (found by prometheus_text_fuzz: the conversion was undefined behaviour).
TEST(PromText, OutOfRangeTimestampIsBad) {
  PromParseStats stats;
  auto samples = parsePromSamples("a 1 1.7e31\nb 2 -9.3e15\nc 3 1700000000.5\n", &stats);
  EXPECT_EQ(stats.bad_lines, 2u);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].name, "c");
  EXPECT_EQ(samples[0].timestamp_ms, 1700000000500);
}

// Label values unescape \\, \" and \n; commas, braces and '=' inside quotes are data; a trailing comma and
// spaces around separators are accepted.
TEST(PromText, EscapedLabels) {
  PromScratch scratch;
  PromSample s;
  bool bad = false;
  ASSERT_TRUE(parsePromLine(R"(m{path="C:\\dir\\x",q="say \"hi\"",nl="a\nb",odd="x,}=y" , } 1)", s, scratch, bad));
  EXPECT_EQ(s.name, "m");
  EXPECT_EQ(s.label("path"), "C:\\dir\\x");
  EXPECT_EQ(s.label("q"), "say \"hi\"");
  EXPECT_EQ(s.label("nl"), "a\nb");
  EXPECT_EQ(s.label("odd"), "x,}=y");
  EXPECT_EQ(s.label("missing"), "");
  // An unknown escape is kept as written.
  ASSERT_TRUE(parsePromLine(R"(m{a="\t"} 2)", s, scratch, bad));
  EXPECT_EQ(s.label("a"), "\\t");
}

// Names with colons, Prometheus 3 quoted names inside the braces, CRLF line ends, OpenMetrics exemplars.
TEST(PromText, NameFormsAndLineEnds) {
  auto samples = parsePromSamples(
      "vllm:x:y_total 1\r\n{\"my.metric\", a=\"b\"} 2\n{\"utf8.name\"} 3\n"
      "reqs_total{a=\"b\"} 4 # {trace_id=\"x\"} 1\n");
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_EQ(samples[0].name, "vllm:x:y_total");
  EXPECT_EQ(samples[1].name, "my.metric");
  EXPECT_EQ(samples[1].labels.size(), 1u);
  EXPECT_EQ(samples[2].name, "utf8.name");
  EXPECT_DOUBLE_EQ(samples[3].value, 4);
}

// Garbage never crashes the parser: bad lines are counted and skipped, good lines around them still count.
TEST(PromText, SkipsGarbageLines) {
  const std::string text =
      "good 1\n"
      "no_value\n"
      "bad{unterminated=\"x 1\n"
      "bad{a=b} 1\n"
      "bad{a=\"b\" 1\n"
      "bad{=\"b\"} 1\n"
      "9starts_with_digit 1\n"
      "bad 1 2 3\n"
      "bad 1 notatimestamp\n"
      "bad 1e\n"
      "bad{a=\"b\\\n"
      "{} 1\n"
      "\xff\xfe junk\n"
      "   \n"
      "# just a comment\n"
      "also_good{x=\"y\"} 2";  // no final newline
  PromParseStats stats;
  auto samples = parsePromSamples(text, &stats);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].name, "good");
  EXPECT_EQ(samples[1].name, "also_good");
  EXPECT_EQ(stats.bad_lines, 12u);
}

// Every prefix of a real page parses without crashing (a body cut short by a timeout or size limit).
TEST(PromText, TruncatedPagesAreSafe) {
  for (size_t cut = 0; cut <= kVllmPage.size(); ++cut) {
    PromParseStats stats;
    parsePromSamples(kVllmPage.substr(0, cut), &stats);
    EXPECT_LE(stats.bad_lines, 1u) << cut;
  }
}

// Random lines over the format's special characters never crash the parser or read outside the text (run it
// under ASan), and every line is either a sample, a comment/blank, or counted bad.
TEST(PromText, RandomGarbageIsSafe) {
  constexpr std::string_view kAlphabet = "{}\"\\=, \t#+-.eEInfNa019:_xyz\r";
  std::mt19937 rng(12345);
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const size_t length = rng() % 80;
    for (size_t i = 0; i < length; ++i) text.push_back(kAlphabet[rng() % kAlphabet.size()]);
    PromParseStats stats;
    auto samples = parsePromSamples(text, &stats);
    EXPECT_EQ(samples.size(), stats.samples);
    EXPECT_LE(stats.samples + stats.bad_lines, 1u);  // one line (no '\n' in the alphabet)
    parseVllmMetrics("vllm:num_requests_running" + text);
  }
}

// A visitor that declines a name is never handed that line (and its labels are not parsed).
TEST(PromText, VisitorSkipsUnwantedNames) {
  struct OnlyRunning final : PromVisitor {
    int seen = 0;
    bool wants(std::string_view name) override { return name == "vllm:num_requests_running"; }
    void sample(const PromSample& s) override { ++seen; }
  } visitor;
  PromParseStats stats = parsePromText(std::string(kVllmPage) + "garbage{ 1\n", visitor);
  EXPECT_EQ(visitor.seen, 1);
  EXPECT_EQ(stats.samples, 1u);
  EXPECT_EQ(stats.bad_lines, 0u);  // the garbage line's name was not wanted
}

// The vLLM snapshot of a real page: gauges, counters and cache_config_info's labels.
TEST(VllmMetrics, ExtractsTheSnapshot) {
  EngineSnapshot s = parseVllmMetrics(kVllmPage);
  EXPECT_TRUE(s.valid);
  EXPECT_TRUE(s.has_running && s.has_waiting && s.has_kv_usage && s.has_prefix_cache && s.has_cache_config);
  EXPECT_DOUBLE_EQ(s.running, 7);
  EXPECT_DOUBLE_EQ(s.waiting, 3);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.4242);
  EXPECT_DOUBLE_EQ(s.prefix_cache_queries, 1.5e6);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hits, 1.2e6);
  EXPECT_DOUBLE_EQ(s.block_size, 16);
  EXPECT_DOUBLE_EQ(s.num_gpu_blocks, 27000);
}

// Data-parallel engines (several engine/model_name series) add up; KV usage is their mean.
TEST(VllmMetrics, SumsDataParallelEngines) {
  EngineSnapshot s = parseVllmMetrics(
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 5\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 1\n"
      "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 4\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.2\n"
      "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.6\n"
      "vllm:prefix_cache_hits_total{engine=\"0\"} 10\nvllm:prefix_cache_hits_total{engine=\"1\"} 5\n"
      "vllm:prefix_cache_queries_total{engine=\"0\"} 20\nvllm:prefix_cache_queries_total{engine=\"1\"} 30\n"
      "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"100\",engine=\"0\"} 1\n"
      "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"150\",engine=\"1\"} 1\n");
  EXPECT_DOUBLE_EQ(s.running, 7);
  EXPECT_DOUBLE_EQ(s.waiting, 5);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.4);
  EXPECT_DOUBLE_EQ(s.prefix_cache_hits, 15);
  EXPECT_DOUBLE_EQ(s.prefix_cache_queries, 50);
  EXPECT_DOUBLE_EQ(s.num_gpu_blocks, 250);
  EXPECT_DOUBLE_EQ(s.block_size, 16);
}

// NaN samples are ignored (a series of only NaN is missing); missing metrics keep their has_* flag false.
TEST(VllmMetrics, NaNAndMissingSeries) {
  EngineSnapshot s = parseVllmMetrics(
      "vllm:num_requests_running{engine=\"0\"} NaN\n"
      "vllm:num_requests_running{engine=\"1\"} 3\n"
      "vllm:kv_cache_usage_perc{engine=\"0\"} NaN\n");
  EXPECT_TRUE(s.valid);
  EXPECT_TRUE(s.has_running);
  EXPECT_DOUBLE_EQ(s.running, 3);
  EXPECT_FALSE(s.has_kv_usage);
  EXPECT_FALSE(s.has_waiting);
  EXPECT_DOUBLE_EQ(s.waiting, 0);
  EXPECT_FALSE(s.has_prefix_cache);
  EXPECT_FALSE(s.has_cache_config);
  // A page that is not vLLM's at all: valid, nothing known.
  EngineSnapshot other = parseVllmMetrics("process_cpu_seconds_total 1.5\n");
  EXPECT_TRUE(other.valid);
  EXPECT_FALSE(other.has_running || other.has_waiting || other.has_kv_usage);
}

// Older vLLM: vllm:gpu_cache_usage_perc and the gpu_prefix_cache counters; the new name wins when both appear.
TEST(VllmMetrics, OlderMetricNames) {
  EngineSnapshot old = parseVllmMetrics(
      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\n"
      "vllm:gpu_prefix_cache_hits_total{model_name=\"m\"} 4\n"
      "vllm:gpu_prefix_cache_queries_total{model_name=\"m\"} 8\n");
  EXPECT_TRUE(old.has_kv_usage);
  EXPECT_DOUBLE_EQ(old.kv_usage, 0.75);
  EXPECT_TRUE(old.has_prefix_cache);
  EXPECT_DOUBLE_EQ(old.prefix_cache_hits, 4);
  EngineSnapshot both = parseVllmMetrics(
      "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.75\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\n");
  EXPECT_DOUBLE_EQ(both.kv_usage, 0.25);
}

// Garbage among vLLM lines costs only the garbage: the good series still come through.
TEST(VllmMetrics, GarbageLinesAreSkipped) {
  EngineSnapshot s = parseVllmMetrics(
      "vllm:num_requests_running{engine=\"0\" 9\n"  // unterminated labels
      "vllm:num_requests_running{engine=\"1\"} 2\n"
      "vllm:num_requests_waiting{engine=\"0\"} lots\n"
      "vllm:cache_config_info{block_size=\"sixteen\",num_gpu_blocks=\"64\"} 1\n"
      "\x01\x02\x03\n");
  EXPECT_DOUBLE_EQ(s.running, 2);
  EXPECT_FALSE(s.has_waiting);
  EXPECT_TRUE(s.has_cache_config);
  EXPECT_DOUBLE_EQ(s.block_size, 0);
  EXPECT_DOUBLE_EQ(s.num_gpu_blocks, 64);
}

}  // namespace
}  // namespace prefixgate::engine
