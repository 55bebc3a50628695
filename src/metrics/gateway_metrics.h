#pragma once
// The gateway's own prefixgate_* Prometheus series (prometheus-cpp core), serialised by the admin listener.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "discovery/pod_set.h"

namespace prefixgate::metrics {

class GatewayMetrics {
 public:
  GatewayMetrics();
  // The registry other parts (e.g. the prefix-cache strategy) add their families to.
  prometheus::Registry& registry() { return *registry_; }

  // Every finished request, whatever its outcome: pod "" when none was chosen. Thread-safe: each thread counts
  // into its own shard (no lock, no cache line shared with other threads); serialize() merges the shards.
  void requestDone(const std::string& model, const std::string& pod, int status, const std::string& strategy,
                   double seconds);
  void firstByte(const std::string& model, double seconds);  // as requestDone
  ~GatewayMetrics();
  void upstreamError(const std::string& pod, const std::string& reason);
  void retried(const std::string& reason);
  // One request's remote tokenizer step: outcome hit, miss, error, timeout or no_pod, and its duration. Thread-safe.
  void remoteTokenizer(std::string_view outcome, double seconds);
  // One audited response (routing/prediction_audit.h) of `pod`: predicted and engine-reported cached tokens and
  // (predicted - engine) / prompt tokens. Thread-safe.
  void predictionAudited(const std::string& pod, uint64_t predicted_tokens, uint64_t engine_cached_tokens,
                         double error_ratio);

  // Disaggregated prefill/decode, one request: how it was split (`outcome`, one of kPdOutcomes), its prefill leg's
  // duration and its KV hand-off (the prefill leg's end to the decode leg's response head); a negative time is not
  // observed. Thread-safe.
  static constexpr std::string_view kPdOutcomes[] = {"disaggregated", "no_transfer_params", "prefill_failed",
                                                     "sidecar", "aggregated", "prefill_busy"};
  void disaggregated(std::string_view outcome, double prefill_seconds, double handoff_seconds);

  // Slot waits (routing.prefix_cache.slot_wait_ms), one request that waited at the gateway for a slot engine's busy
  // slot: `outcome` turn (the slot freed for it), timeout (it was sent after slot_wait_ms) or client_gone (the client
  // hung up: never sent), and how long. Thread-safe.
  static constexpr std::string_view kSlotWaitOutcomes[] = {"turn", "timeout", "client_gone"};
  void slotWaited(std::string_view outcome, double seconds);

  // Counts another part keeps itself (e.g. the tokenizer's cache), brought into the registry's counters at each
  // scrape: `read` returns the running totals of `labels`' series of a counter family it names.
  struct ScrapedCounter {
    std::string name;
    std::string help;
    std::function<std::vector<std::pair<std::map<std::string, std::string>, uint64_t>>()> read;
  };
  void addScrapedCounter(ScrapedCounter counter);

  // Prometheus text format; pod gauges are refreshed from `pods` first.
  std::string serialize(const discovery::PodSet& pods, int64_t now_ms);

 private:
  // prefixgate_requests_total, _request_duration_seconds and _time_to_first_byte_seconds, by thread.
  class Shard;
  Shard& shard();
  std::vector<prometheus::MetricFamily> mergeShards();
  struct PredictionSeries {
    prometheus::Counter* responses = nullptr;
    prometheus::Counter* predicted = nullptr;
    prometheus::Counter* engine_cached = nullptr;
    prometheus::Histogram* error_ratio = nullptr;
  };
  PredictionSeries& predictionSeries(const std::string& pod);

  std::shared_ptr<prometheus::Registry> registry_;
  struct ScrapedFamily {
    ScrapedCounter source;
    prometheus::Family<prometheus::Counter>* family;
  };
  std::vector<ScrapedFamily> scraped_;  // set up before serving (read by serialize only)
  // prefixgate_remote_tokenizer_requests_total, one series per outcome, all created at start (read-only after).
  std::vector<std::pair<std::string_view, prometheus::Counter*>> remote_tokenizer_requests_;
  prometheus::Histogram* remote_tokenizer_seconds_ = nullptr;
  std::vector<std::pair<std::string_view, prometheus::Counter*>> pd_requests_;  // by outcome, made at start
  prometheus::Histogram* pd_prefill_seconds_ = nullptr;
  prometheus::Histogram* pd_handoff_seconds_ = nullptr;
  std::vector<std::pair<std::string_view, prometheus::Counter*>> slot_waits_;  // by outcome, made at start
  prometheus::Histogram* slot_wait_seconds_ = nullptr;
  std::shared_mutex series_mutex_;
  std::unordered_map<std::string, PredictionSeries> prediction_series_;  // by pod
  const uint64_t instance_;  // tells this object's shards from another's in a thread's cache
  std::mutex shards_mutex_;
  std::vector<std::unique_ptr<Shard>> shards_;
  prometheus::Family<prometheus::Counter>& upstream_errors_;
  prometheus::Family<prometheus::Counter>& retries_;
  prometheus::Family<prometheus::Gauge>& pods_;
  prometheus::Family<prometheus::Gauge>& pod_in_flight_;
  prometheus::Family<prometheus::Gauge>& pod_ready_;
  prometheus::Family<prometheus::Counter>& engine_scrape_errors_;
  prometheus::Family<prometheus::Counter>& prediction_responses_;
  prometheus::Family<prometheus::Counter>& predicted_tokens_;
  prometheus::Family<prometheus::Counter>& engine_cached_tokens_;
  prometheus::Family<prometheus::Histogram>& prediction_error_;
};

}  // namespace prefixgate::metrics
