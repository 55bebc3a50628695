#pragma once
// The engine's Prometheus exposition, with vLLM's metric names and labels (pure: renders a snapshot).
#include <cstdint>
#include <string>
#include <vector>

#include "engine_sim/engine_dialect.h"
#include "engine_sim/step_scheduler.h"

namespace prefixgate::sim {

// A Prometheus histogram: observations counted in the first bucket whose upper bound holds them.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  const std::vector<double>& upperBounds() const { return upper_bounds_; }
  // Per-bucket (not cumulative) counts; one more than upperBounds() for +Inf.
  const std::vector<uint64_t>& bucketCounts() const { return bucket_counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> bucket_counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Latency histograms in seconds, with vLLM's bucket bounds (shortened).
struct EngineHistograms {
  Histogram time_to_first_token{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                                 7.5, 10.0, 20.0, 40.0, 80.0}};
  Histogram e2e_request_latency{{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                 120.0, 240.0}};
  Histogram request_queue_time{{0.001, 0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0}};
  Histogram inter_token_latency{{0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5}};
};

// What the engine did, in simulated time (the step times before --time-scale): the counters and rates of
// llama-server's and SGLang's pages (vLLM's page shows none of it).
struct EngineActivity {
  uint64_t steps = 0;                // engine steps run (llama-server: llama_decode calls)
  uint64_t busy_slot_steps = 0;      // the sequences in each step, summed over the steps
  uint64_t prefill_tokens = 0;       // prompt tokens computed (cache misses, and recomputation after preemption)
  double prefill_ms = 0;             // simulated time of the steps that prefilled
  double busy_ms = 0;                // simulated time of all steps
  uint64_t generated_tokens = 0;     // output tokens sampled
  uint64_t predicted_tokens = 0;     // output tokens of finished requests
  uint64_t predicted_steps = 0;      // their decode steps (a request's first token is free: it ends its prefill)
  double predicted_ms = 0;           // their generation time, each from its first token to its last
  uint64_t max_sequence_tokens = 0;  // the longest prompt + output seen
};

// The histograms with the bucket bounds of `dialect`'s engine: vLLM's above, or SGLang's
// (TokenizerMetricsCollector's defaults); llama-server has none.
EngineHistograms engineHistograms(EngineDialect dialect);

struct MetricsSnapshot {
  size_t num_requests_running = 0;
  size_t num_requests_waiting = 0;
  double kv_cache_usage = 0;  // 0..1
  EngineCounters counters;
  uint32_t block_size = 16;
  uint64_t num_gpu_blocks = 0;
  uint64_t used_blocks = 0;  // referenced by running sequences
  EngineActivity activity;   // since the engine started
  EngineActivity window;     // since the last Engine::startActivityWindow() (the last /metrics scrape)
  std::vector<SlotView> slots;  // each slot (--kv-cache-model slots); empty otherwise
};

// A Prometheus label value with backslash, double quote and newline escaped.
std::string escapeLabel(const std::string& value);

// The /metrics body: gauges, counters (with _total), histograms and vllm:cache_config_info, each with # HELP and
// # TYPE lines and the labels model_name="<model_name>", engine="0".
std::string renderMetrics(const MetricsSnapshot& snapshot, const EngineHistograms& histograms,
                          const std::string& model_name);

}  // namespace prefixgate::sim
