#pragma once
// The aibrix_prefix_cache_* series of the AIBrix gateway, with its names, labels and buckets, recorded by the
// prefix-cache strategy in every mode (AIBrix records most of them only in its standalone mode).
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace prefixgate::routing {

class PrefixMetrics {
 public:
  explicit PrefixMetrics(prometheus::Registry& registry);
  // One routing decision of `model`: the chosen pod's match, the selection outcome and the time it took.
  void decision(const std::string& model, int match_percent, std::string_view selection, double seconds);
  void error(const std::string& model, const std::string& reason);

  // "0", "1-25", "26-50", "51-75", "76-100".
  static std::string_view bucketOf(int match_percent);

 private:
  struct ModelSeries {
    std::array<prometheus::Counter*, 5> decisions{};
    prometheus::Histogram* latency = nullptr;
    std::unordered_map<std::string, prometheus::Counter*> selections;  // guarded by mutex_ (unique)
  };
  ModelSeries& seriesFor(const std::string& model);
  prometheus::Counter& selectionCounter(ModelSeries& series, const std::string& model, std::string_view selection);

  prometheus::Family<prometheus::Counter>& decisions_;
  prometheus::Family<prometheus::Counter>& selections_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Gauge>& indexer_status_;
  std::shared_mutex mutex_;
  std::unordered_map<std::string, std::unique_ptr<ModelSeries>> models_;
};

}  // namespace prefixgate::routing
