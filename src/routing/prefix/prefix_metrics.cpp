#include "routing/prefix/prefix_metrics.h"

#include <mutex>

namespace prefixgate::routing {
namespace {

constexpr std::array<std::string_view, 5> kBuckets = {"0", "1-25", "26-50", "51-75", "76-100"};
constexpr const char* kErrorReasons[] = {"record_failed", "tokenize_failed"};

prometheus::Histogram::BucketBoundaries latencyBuckets() {
  // 10 us doubling to ~164 ms, as AIBrix.
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 10e-6; v < 0.2; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

PrefixMetrics::PrefixMetrics(prometheus::Registry& registry)
    : decisions_(prometheus::BuildCounter()
                     .Name("aibrix_prefix_cache_routing_decisions_total")
                     .Help("Prefix-cache routing decisions, by model and the chosen pod's prefix-match bucket")
                     .Register(registry)),
      selections_(prometheus::BuildCounter()
                      .Name("aibrix_prefix_cache_routing_selection_total")
                      .Help("Prefix-cache selection outcomes: prefix_match, prefix_match_skipped, least_request_fallback")
                      .Register(registry)),
      latency_(prometheus::BuildHistogram()
                   .Name("aibrix_prefix_cache_routing_latency_seconds")
                   .Help("Time to tokenize, hash, match and choose, by model")
                   .Register(registry)),
      errors_(prometheus::BuildCounter()
                  .Name("aibrix_prefix_cache_routing_errors_total")
                  .Help("Prefix-cache routing errors, by model and reason")
                  .Register(registry)),
      indexer_status_(prometheus::BuildGauge()
                          .Name("aibrix_prefix_cache_indexer_status")
                          .Help("1 when the prefix index of a model is in use, by indexer type (local or sync)")
                          .Register(registry)) {}

std::string_view PrefixMetrics::bucketOf(int p) {
  if (p <= 0) return kBuckets[0];
  if (p <= 25) return kBuckets[1];
  if (p <= 50) return kBuckets[2];
  if (p <= 75) return kBuckets[3];
  return kBuckets[4];
}

PrefixMetrics::ModelSeries& PrefixMetrics::seriesFor(const std::string& model) {
  {
    std::shared_lock lock(mutex_);
    if (auto it = models_.find(model); it != models_.end()) return *it->second;
  }
  std::unique_lock lock(mutex_);
  auto& slot = models_[model];
  if (!slot) {
    slot = std::make_unique<ModelSeries>();
    for (size_t i = 0; i < kBuckets.size(); ++i)
      slot->decisions[i] = &decisions_.Add({{"model", model}, {"match_percent_bucket", std::string(kBuckets[i])}});
    slot->latency = &latency_.Add({{"model", model}}, latencyBuckets());
    indexer_status_.Add({{"model", model}, {"indexer_type", "local"}}).Set(1);
    // Error series exist from the first decision on, so dashboards see 0 rather than no data.
    for (const char* reason : kErrorReasons) errors_.Add({{"model", model}, {"reason", reason}});
  }
  return *slot;
}

prometheus::Counter& PrefixMetrics::selectionCounter(ModelSeries& series, const std::string& model,
                                                     std::string_view selection) {
  {
    std::shared_lock lock(mutex_);
    if (auto it = series.selections.find(std::string(selection)); it != series.selections.end()) return *it->second;
  }
  std::unique_lock lock(mutex_);
  auto& counter = series.selections[std::string(selection)];
  if (!counter) counter = &selections_.Add({{"model", model}, {"selection", std::string(selection)}});
  return *counter;
}

void PrefixMetrics::decision(const std::string& model, int match_percent, std::string_view selection, double seconds) {
  ModelSeries& series = seriesFor(model);
  const std::string_view bucket = bucketOf(match_percent);
  for (size_t i = 0; i < kBuckets.size(); ++i)
    if (kBuckets[i] == bucket) series.decisions[i]->Increment();
  series.latency->Observe(seconds);
  if (!selection.empty()) selectionCounter(series, model, selection).Increment();
}

void PrefixMetrics::error(const std::string& model, const std::string& reason) {
  errors_.Add({{"model", model}, {"reason", reason}}).Increment();
}

}  // namespace prefixgate::routing
