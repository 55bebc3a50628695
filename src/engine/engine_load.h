#pragma once
// What the gateway knows about one engine pod's load beyond its own in-flight count: the latest scrape of the
// engine's /metrics and the output tokens/s measured from the responses the gateway relays. One per pod, owned by
// its PodState. Thread-safe: the scraper publishes, request threads read, relays add output tokens.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

#include "engine/engine_kind.h"

namespace prefixgate::engine {

// One scrape of an engine's /metrics page, read in the pod's dialect (engine_metrics.h). A signal the page lacked
// keeps 0 and has_* false: unknown, never idle.
struct EngineSnapshot {
  bool valid = false;           // false until the first successful scrape
  int64_t scraped_at_ms = 0;    // steady clock of the last successful scrape
  bool stale = false;           // the latest scrape failed: the values are still those of scraped_at_ms
  uint32_t failed_scrapes = 0;  // consecutive failures since the last success
  std::string last_error;       // why the latest scrape failed ("" after a success)
  EngineKind engine = EngineKind::kAuto;  // the dialect the page was read as
  uint32_t known_series = 0;    // samples of the dialect's series on the page (0: nothing could be read: a failure)
  double running = 0;           // vllm:num_requests_running, sglang:num_running_reqs, llamacpp:requests_processing
  bool has_running = false;
  double waiting = 0;  // vllm:num_requests_waiting, sglang:num_queue_reqs, llamacpp:requests_deferred
  bool has_waiting = false;
  double kv_usage = 0;  // vllm:kv_cache_usage_perc (or vllm:gpu_cache_usage_perc), sglang:token_usage; 0..1
  bool has_kv_usage = false;
  double prefix_cache_hits = 0;     // prompt tokens served from the cache (counter)
  double prefix_cache_queries = 0;  // prompt tokens looked up (counter)
  bool has_prefix_cache = false;
  double block_size = 0;      // vllm:cache_config_info{block_size}
  double num_gpu_blocks = 0;  // vllm:cache_config_info{num_gpu_blocks}, summed over engines
  bool has_cache_config = false;
  // The KV cache's size in tokens when the page says it: vLLM num_gpu_blocks x block_size, SGLang
  // sglang:max_total_num_tokens (llama.cpp's comes from /props, see EngineLoad::publishSlots).
  double kv_capacity_tokens = 0;
  bool has_kv_capacity = false;
};

// Why a scrape failed, for prefixgate_engine_scrape_errors_total{reason} and /debug/pods.
enum class ScrapeError : uint8_t {
  kUnreachable,    // no HTTP answer (connect, timeout, a cut response)
  kStatus,         // an answer other than 200
  kUnknownSeries,  // a 200 page without a single series of the pod's dialect (or of any known one, with auto)
  kProps,          // llama.cpp: /props did not answer or did not say total_slots and n_ctx (capacity unknown)
  kCount,
};
// "unreachable", "status", "unknown_series", "props".
std::string_view scrapeErrorLabel(ScrapeError error);

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
  // own once they are older than maxEngineMetricsAgeMs. Counted by reason.
  void markScrapeFailed(std::string error, ScrapeError reason = ScrapeError::kUnreachable);
  // A failed side request that is not the load scrape (llama.cpp's /props): counted, kept as capacityError().
  void markCapacityFailed(std::string error);
  // Failed scrapes of the pod so far, by reason (counters: they only grow). Lock-free.
  uint64_t scrapeErrors(ScrapeError reason) const {
    return scrape_errors_[static_cast<size_t>(reason)].load(std::memory_order_relaxed);
  }
  EngineSnapshot latest() const {
    std::lock_guard lock(mutex_);
    return snapshot_;
  }
  // Lock-free; called on the request path.
  EngineLoadView view() const {
    return EngineLoadView{waiting_.load(std::memory_order_relaxed), kv_usage_.load(std::memory_order_relaxed),
                          scraped_at_ms_.load(std::memory_order_relaxed), capacity_.load(std::memory_order_relaxed)};
  }

  // The engine's KV cache size in tokens (vLLM: num_gpu_blocks x block_size of vllm:cache_config_info; SGLang:
  // sglang:max_total_num_tokens; llama.cpp: its slots x their context, from /props); 0 until the engine said.
  // Lock-free.
  uint64_t kvCapacityTokens() const { return kv_capacity_tokens_.load(std::memory_order_relaxed); }

  // llama.cpp: the engine keeps one prompt per slot (`total_slots` of /props), each up to `slot_context_tokens`
  // (its n_ctx). Sets kvCapacityTokens to their product and clears capacityError. The scraper only.
  void publishSlots(uint32_t slots, uint32_t slot_context_tokens);
  // The slots the engine reported (0: not a slot engine, or not known yet). Lock-free.
  uint32_t slots() const { return slots_.load(std::memory_order_relaxed); }
  // Why the capacity could not be read ("" when it could, or was never asked).
  std::string capacityError() const {
    std::lock_guard lock(mutex_);
    return capacity_error_;
  }
  // A slot engine's (llama.cpp's) cache beyond its slots, as the gateway has learned it: unknown at first
  // (llama-server keeps a host prompt cache by default, --cache-ram 8 GiB, of a size it does not report, so predictions then come
  // from routing history alone); slots only, once responses showed the engine serving no more than its slots held
  // where routing history promised more (--cache-ram 0: predictions are then bounded by the slots); host cache,
  // once responses showed it serving more than its slots held. Decided by votes (voteSlotCache), then kept for the
  // pod's life. Lock-free.
  enum class SlotCache : uint8_t { kUnknown, kSlotsOnly, kHostCache };
  SlotCache slotCache() const { return slot_cache_.load(std::memory_order_relaxed); }
  // One response's evidence (`host`: it served more than the slots held; else: no more, where routing history
  // promised more). Decides once one side leads by kSlotCacheVotes (each vote is clean evidence, and until then
  // every request predicted from history on a pod that keeps nothing else risks a miss predicted a hit: decide at
  // the first);
  // slots only is still revised to host cache after kSlotCacheRevisions more hits beyond the slots. Returns the
  // mode then set, or nullopt when this vote changed nothing (for a log line once).
  static constexpr int32_t kSlotCacheVotes = 1;
  static constexpr uint32_t kSlotCacheRevisions = 3;
  std::optional<SlotCache> voteSlotCache(bool host);
  bool hostCacheSeen() const { return slotCache() == SlotCache::kHostCache; }

  // The dialect the pod's /metrics page was recognised as (kAuto until one was). Set by the scraper. Lock-free.
  EngineKind detectedKind() const { return detected_kind_.load(std::memory_order_relaxed); }
  void setDetectedKind(EngineKind kind) { detected_kind_.store(kind, std::memory_order_relaxed); }

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
  std::atomic<EngineKind> detected_kind_{EngineKind::kAuto};
  std::atomic<uint32_t> slots_{0};
  std::atomic<SlotCache> slot_cache_{SlotCache::kUnknown};
  std::atomic<int32_t> slot_cache_votes_{0};  // host-cache votes minus slots-only votes
  std::atomic<uint32_t> slot_cache_revisions_{0};  // host-cache votes since slots only was decided
  std::string capacity_error_;  // guarded by mutex_
  std::atomic<uint64_t> scrape_errors_[static_cast<size_t>(ScrapeError::kCount)] = {};
};

}  // namespace prefixgate::engine
