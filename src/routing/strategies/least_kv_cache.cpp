// least-kv-cache: the pod whose engine reports the lowest KV cache usage (vllm:kv_cache_usage_perc); equal
// usages go to the pod with fewer requests in flight (the Router's tie-break). A pod whose usage is unknown
// (no scrape yet, or older than the staleness limit) counts as the mean of the known ones, so it is neither
// favoured nor avoided; with none known this is least-request. KV usage moves only once per scrape, so within a
// scrape interval a burst goes to the same pod; `load-balance` is the burst-safe choice.
#include <cmath>

#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class LeastKvCacheStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "least-kv-cache";
  void score(RoutingInput& input) override {
    double sum = 0;
    size_t known = 0;
    for (const Candidate& c : input.candidates) {
      if (std::isnan(c.kv_usage)) continue;
      sum += c.kv_usage;
      ++known;
    }
    const double fallback = known ? sum / static_cast<double>(known) : 0.0;
    for (Candidate& c : input.candidates) c.score = 0.0 - (std::isnan(c.kv_usage) ? fallback : c.kv_usage);
  }
};

}  // namespace

}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(least_kv_cache, LeastKvCacheStrategy)
