#include "engine_sim/metrics_text.h"

#include <algorithm>
#include <fmt/format.h>
#include <iterator>

namespace prefixgate::sim {
namespace {

void header(std::string& out, const char* name, const char* type, const char* help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void gauge(std::string& out, const std::string& labels, const char* name, const char* help, double value) {
  header(out, name, "gauge", help);
  fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels, value);
}

void counter(std::string& out, const std::string& labels, const char* name, const char* help, uint64_t value) {
  header(out, name, "counter", help);
  fmt::format_to(std::back_inserter(out), "{}_total{{{}}} {}\n", name, labels, value);
}

void histogram(std::string& out, const std::string& labels, const char* name, const char* help,
               const Histogram& h) {
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.upperBounds().size(); ++i) {
    cumulative += h.bucketCounts()[i];
    fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, h.upperBounds()[i],
                   cumulative);
  }
  fmt::format_to(std::back_inserter(out), "{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, h.count());
  fmt::format_to(std::back_inserter(out), "{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, h.sum(), name,
                 labels, h.count());
}

}  // namespace

std::string escapeLabel(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1, 0) {
  std::sort(upper_bounds_.begin(), upper_bounds_.end());
}

void Histogram::observe(double value) {
  auto bound = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  ++bucket_counts_[static_cast<size_t>(bound - upper_bounds_.begin())];
  sum_ += value;
  ++count_;
}

EngineHistograms engineHistograms(EngineDialect dialect) {
  EngineHistograms histograms;
  if (dialect != EngineDialect::kSglang) return histograms;
  histograms.time_to_first_token =
      Histogram({0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400});
  histograms.inter_token_latency =
      Histogram({0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
                 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000});
  histograms.e2e_request_latency =
      Histogram({0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400});
  return histograms;
}

std::string renderMetrics(const MetricsSnapshot& snapshot, const EngineHistograms& histograms,
                          const std::string& model_name) {
  std::string labels = fmt::format("model_name=\"{}\",engine=\"0\"", escapeLabel(model_name));
  std::string out;
  gauge(out, labels, "vllm:num_requests_running", "Number of requests in model execution batches.",
        static_cast<double>(snapshot.num_requests_running));
  gauge(out, labels, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        static_cast<double>(snapshot.num_requests_waiting));
  gauge(out, labels, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        snapshot.kv_cache_usage);
  const EngineCounters& c = snapshot.counters;
  counter(out, labels, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
          c.prefix_cache_queries);
  counter(out, labels, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
          c.prefix_cache_hits);
  counter(out, labels, "vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens);
  counter(out, labels, "vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens);
  counter(out, labels, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", c.preemptions);
  histogram(out, labels, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            histograms.time_to_first_token);
  histogram(out, labels, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            histograms.inter_token_latency);
  histogram(out, labels, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            histograms.e2e_request_latency);
  histogram(out, labels, "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", histograms.request_queue_time);
  header(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  fmt::format_to(std::back_inserter(out),
                 "vllm:cache_config_info{{block_size=\"{}\",num_gpu_blocks=\"{}\",enable_prefix_caching=\"True\","
                 "engine=\"0\"}} 1\n",
                 snapshot.block_size, snapshot.num_gpu_blocks);
  return out;
}

}  // namespace prefixgate::sim
