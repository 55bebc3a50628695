#pragma once
// What the gateway knows about one engine pod's load beyond its own in-flight count: the latest scrape of the
// engine's /metrics and the output tokens/s measured from the responses the gateway relays. One per pod, owned by
// its PodState. Thread-safe: the scraper publishes, request threads read, relays add output tokens.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>

namespace prefixgate::engine {

// One scrape of a vLLM /metrics page (see parseVllmMetrics). A metric the page lacked keeps 0 and has_* false.
struct EngineSnapshot {
  bool valid = false;           // false until the first successful scrape
  int64_t scraped_at_ms = 0;    // steady clock of the last successful scrape
  bool stale = false;           // the latest scrape failed: the values are still those of scraped_at_ms
  uint32_t failed_scrapes = 0;  // consecutive failures since the last success
  std::string last_error;       // why the latest scrape failed ("" after a success)
  double running = 0;           // vllm:num_requests_running
  bool has_running = false;
  double waiting = 0;  // vllm:num_requests_waiting
  bool has_waiting = false;
  double kv_usage = 0;  // vllm:kv_cache_usage_perc (or vllm:gpu_cache_usage_perc), 0..1
  bool has_kv_usage = false;
  double prefix_cache_hits = 0;     // vllm:prefix_cache_hits_total (tokens)
  double prefix_cache_queries = 0;  // vllm:prefix_cache_queries_total (tokens)
  bool has_prefix_cache = false;
  double block_size = 0;      // vllm:cache_config_info{block_size}
  double num_gpu_blocks = 0;  // vllm:cache_config_info{num_gpu_blocks}, summed over engines
  bool has_cache_config = false;
};

// The few numbers routing reads for every candidate of every decision, read without a lock. The fields are
// read one by one, so they may come from two consecutive scrapes; a load signal tolerates that.
struct EngineLoadView {
  double waiting = NAN;         // NaN: unknown (never scraped, or the engine does not report it)
  double kv_usage = NAN;        // NaN: unknown
  int64_t scraped_at_ms = -1;   // -1: never scraped successfully
  double capacity = 0;          // measured output tokens/s; 0: nothing measured yet

  // Whether the engine numbers are recent enough to steer routing (see maxEngineMetricsAgeMs).
  bool fresh(int64_t now_ms, int64_t max_age_ms) const {
    return scraped_at_ms >= 0 && now_ms - scraped_at_ms <= max_age_ms;
  }
};

// Engine metrics older than this count as unknown (neutral): max(3 scrape intervals, one interval + the scrape
// timeout), so a single slow or failed scrape does not flip a pod to neutral, but a pod whose /metrics stopped
// answering stops steering routing within about a second at the defaults.
int64_t maxEngineMetricsAgeMs(uint32_t scrape_interval_ms, uint32_t scrape_timeout_ms);

class EngineLoad {
 public:
  // A successful scrape (the scraper only): becomes the latest snapshot, valid and not stale.
  void publish(const EngineSnapshot& snapshot);
  // A failed scrape (the scraper only): the last values stay, marked stale, so strategies turn neutral on their
  // own once they are older than maxEngineMetricsAgeMs.
  void markScrapeFailed(std::string error);
  EngineSnapshot latest() const {
    std::lock_guard lock(mutex_);
    return snapshot_;
  }
  // Lock-free; called on the request path.
  EngineLoadView view() const {
    return EngineLoadView{waiting_.load(std::memory_order_relaxed), kv_usage_.load(std::memory_order_relaxed),
                          scraped_at_ms_.load(std::memory_order_relaxed), capacity_.load(std::memory_order_relaxed)};
  }

  // The engine's KV cache size in tokens (num_gpu_blocks x block_size of vllm:cache_config_info); 0 until a
  // scrape reported it. Lock-free.
  uint64_t kvCapacityTokens() const { return kv_capacity_tokens_.load(std::memory_order_relaxed); }

  // A relayed response produced `tokens` output tokens, finishing at now_ms (steady clock).
  void addOutputTokens(uint64_t tokens, int64_t now_ms);
  // Output tokens/s as an EWMA with a 10 s time constant; 0 when nothing was measured yet.
  double capacityTokensPerSecond(int64_t now_ms) const;

 private:
  mutable std::mutex mutex_;
  EngineSnapshot snapshot_;
  // EWMA state (guarded by mutex_).
  double rate_ = 0;
  bool has_rate_ = false;
  int64_t last_ms_ = 0;
  double pending_tokens_ = 0;
  // Copies of what routing reads, published after each update.
  std::atomic<double> waiting_{NAN};
  std::atomic<double> kv_usage_{NAN};
  std::atomic<int64_t> scraped_at_ms_{-1};
  std::atomic<double> capacity_{0};
  std::atomic<uint64_t> kv_capacity_tokens_{0};
};

}  // namespace prefixgate::engine
