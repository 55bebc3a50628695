// prefix-cache-preble, after Preble (Srivatsa et al., "Preble: Efficient Distributed Prompt Scheduling for LLM
// Serving", ICLR 2025). Each request's prompt is matched like prefix-cache's; then (prebleScores):
//   exploit   when the longest cached part is longer than the rest of the prompt: among the pods holding it, the
//             one with the lowest window load;
//   explore   otherwise: the pod with the lowest window load + the prefill of the tokens it misses + the decode;
//   rebalance first, when the busiest pod's window load exceeds rebalance_ratio x the least busy one's: the least
//             busy pod.
// A pod's window load is the work routed to it over the last window_ms (Preble's 3 minutes): for each request,
// its missed prompt tokens (prefill) + decode_token_cost x its output tokens (max_tokens, else
// default_output_tokens), in prompt-token units, so no GPU table is needed: the one constant is the ratio of a
// decoded token's cost to a prefilled one's (the default fits the engine simulator; docs/configuration.md).
// Preble's eviction term (the cost of evicting other prefixes) is not modelled: the gateway's capacity-aware index
// already forgets what a pod can no longer hold. Bounded: per pod a ring of kBuckets sums.
#include <array>
#include <mutex>
#include <unordered_map>

#include "config/yaml_reader.h"
#include "openai/request.h"
#include "routing/prefix/prefix_strategy.h"
#include "routing/prefix/selection.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

// Work routed to one pod over a sliding window, in kBuckets buckets of window / kBuckets each.
class WindowLoad {
 public:
  static constexpr size_t kBuckets = 60;
  void add(int64_t now_ms, int64_t bucket_ms, double cost) { bucketAt(now_ms, bucket_ms).cost += cost; }
  double sum(int64_t now_ms, int64_t bucket_ms) const {
    const int64_t epoch = now_ms / bucket_ms;
    double total = 0;
    for (const Bucket& b : buckets_)
      if (b.epoch > epoch - static_cast<int64_t>(kBuckets) && b.epoch <= epoch) total += b.cost;
    return total;
  }
  int64_t newestEpoch() const {
    int64_t newest = INT64_MIN;
    for (const Bucket& b : buckets_) newest = std::max(newest, b.epoch);
    return newest;
  }

 private:
  struct Bucket {
    int64_t epoch = INT64_MIN;
    double cost = 0;
  };
  Bucket& bucketAt(int64_t now_ms, int64_t bucket_ms) {
    const int64_t epoch = now_ms / bucket_ms;
    Bucket& b = buckets_[static_cast<size_t>(epoch % static_cast<int64_t>(kBuckets))];
    if (b.epoch != epoch) b = {epoch, 0};
    return b;
  }
  std::array<Bucket, kBuckets> buckets_;
};

class PrefixCachePrebleStrategy final : public PrefixStrategy {
 public:
  static constexpr std::string_view kName = "prefix-cache-preble";
  struct Settings {
    uint32_t window_ms = 180000;
    double rebalance_ratio = 1.5;
    double decode_token_cost = 10;
    uint32_t default_output_tokens = 256;
    void read(config::YamlReader& r) {
      r.read("window_ms", window_ms);
      r.read("rebalance_ratio", rebalance_ratio);
      r.read("decode_token_cost", decode_token_cost);
      r.read("default_output_tokens", default_output_tokens);
      if (window_ms < WindowLoad::kBuckets)
        r.problem("window_ms", "must be at least " + std::to_string(WindowLoad::kBuckets));
      if (!(rebalance_ratio >= 1)) r.problem("rebalance_ratio", "must be at least 1");
      if (!(decode_token_cost >= 0) || decode_token_cost > 1e6)
        r.problem("decode_token_cost", "must be between 0 and 1000000");
    }
  };
  PrefixCachePrebleStrategy(const config::Config& config, PrefixServices& services, PrefixMetrics& metrics,
                            const Settings& settings)
      : PrefixStrategy(config, services, metrics),
        settings_(settings),
        bucket_ms_(settings.window_ms / static_cast<int64_t>(WindowLoad::kBuckets)) {}
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps, const Settings& settings) {
    return createPrefixStrategy<PrefixCachePrebleStrategy>(deps, settings);
  }
  std::string_view name() const override { return kName; }

  void score(RoutingInput& input) override {
    Match& m = hashAndMatch(input);
    const size_t n = input.candidates.size();
    const double tokens = static_cast<double>(m.prompt.tokens);
    thread_local std::vector<double> cached, load;
    cached.resize(n);
    load.resize(n);
    const int64_t now = steadyNowMs();
    {
      std::lock_guard lock(mutex_);
      for (size_t i = 0; i < n; ++i) {
        auto it = windows_.find(input.candidates[i].pod_id);
        load[i] = it == windows_.end() ? 0 : it->second.sum(now, bucket_ms_);
      }
    }
    for (size_t i = 0; i < n; ++i) cached[i] = m.prompt.usable ? tokens * m.prompt.fraction(m.matched[i]) : 0;
    input.outcome = prebleScores(input.candidates, cached, tokens, load, outputTokens(input.request),
                                 {settings_.decode_token_cost, settings_.rebalance_ratio});
  }

  void onPicked(RoutingInput& input, size_t chosen) override {
    recordPick(input, chosen);
    if (input.dry_run) return;
    const Match& m = current();
    const double tokens = static_cast<double>(m.prompt.tokens);
    const double missed = tokens - (m.prompt.usable ? tokens * m.prompt.fraction(m.matched[chosen]) : 0);
    const double cost = missed + settings_.decode_token_cost * outputTokens(input.request);
    const int64_t now = steadyNowMs();
    std::lock_guard lock(mutex_);
    windows_[input.candidates[chosen].pod_id].add(now, bucket_ms_, cost);
    if (windows_.size() > kPrunedAbove) prune(now);
  }

 private:
  // Pods that left the set leave their windows behind: beyond this many windows, the idle ones are dropped.
  static constexpr size_t kPrunedAbove = 4096;
  double outputTokens(const openai::RequestView& request) const {
    return request.max_tokens ? request.max_tokens : settings_.default_output_tokens;
  }
  void prune(int64_t now) {
    const int64_t oldest = now / bucket_ms_ - static_cast<int64_t>(WindowLoad::kBuckets);
    std::erase_if(windows_, [oldest](const auto& entry) { return entry.second.newestEpoch() <= oldest; });
  }

  const Settings settings_;
  const int64_t bucket_ms_;
  std::mutex mutex_;
  std::unordered_map<PodId, WindowLoad> windows_;  // guarded by mutex_
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(prefix_cache_preble, PrefixCachePrebleStrategy)
