// prefix-cache-preble, after Preble (Srivatsa et al., "Preble: Efficient Distributed Prompt Scheduling for LLM
// Serving", ICLR 2025). Each request's prompt is matched like prefix-cache's; then (prebleScores):
//   exploit   when the longest cached part is longer than the rest of the prompt: among the pods holding it, the
//             one with the lowest window load;
//   explore   otherwise: the pod with the lowest window load + the prefill of the tokens it misses + the decode;
//   rebalance first, when the busiest pod's window load exceeds rebalance_ratio x the least busy one's, and the
//             least busy one's by more than rebalance_min_gap_requests x this request's own work (its whole prompt
//             + its decode): the least busy pod. Without the gap the ratio fired over near-zero loads: on an idle
//             fleet, sequential requests sharing a long system prompt went round the pods, missing it each time.
// A pod's window load is the work routed to it over the last window_ms (Preble's 3 minutes): for each request,
// its missed prompt tokens (prefill) + decode_token_cost x its output tokens (max_tokens, else
// default_output_tokens), in prompt-token units, so no GPU table is needed: the one constant is the ratio of a
// decoded token's cost to a prefilled one's (the default fits the engine simulator; docs/configuration.md).
// Preble's eviction term (the cost of evicting other prefixes) is not modelled: the gateway's capacity-aware index
// already forgets what a pod can no longer hold. Bounded: WindowLoads.
#include "config/yaml_reader.h"
#include "openai/request.h"
#include "routing/prefix/prefix_strategy.h"
#include "routing/prefix/selection.h"
#include "routing/prefix/window_loads.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class PrefixCachePrebleStrategy final : public PrefixStrategy {
 public:
  static constexpr std::string_view kName = "prefix-cache-preble";
  struct Settings {
    uint32_t window_ms = 180000;
    double rebalance_ratio = 1.5;
    double rebalance_min_gap_requests = 8;  // as routing.load_imbalance.min_gap, in requests like this one
    double decode_token_cost = 10;
    uint32_t default_output_tokens = 256;
    void read(config::YamlReader& r) {
      r.read("window_ms", window_ms);
      r.read("rebalance_ratio", rebalance_ratio);
      r.read("rebalance_min_gap_requests", rebalance_min_gap_requests);
      r.read("decode_token_cost", decode_token_cost);
      r.read("default_output_tokens", default_output_tokens);
      if (window_ms < WindowLoads::kBuckets)
        r.problem("window_ms", "must be at least " + std::to_string(WindowLoads::kBuckets));
      if (!(rebalance_ratio >= 1)) r.problem("rebalance_ratio", "must be at least 1");
      if (!(rebalance_min_gap_requests >= 0) || rebalance_min_gap_requests > 1e6)
        r.problem("rebalance_min_gap_requests", "must be between 0 and 1000000");
      if (!(decode_token_cost >= 0) || decode_token_cost > 1e6)
        r.problem("decode_token_cost", "must be between 0 and 1000000");
    }
  };
  PrefixCachePrebleStrategy(const config::Config& config, PrefixServices& services, const Settings& settings)
      : PrefixStrategy(config, services),
        settings_(settings),
        windows_(settings.window_ms) {}
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps, const Settings& settings) {
    return createPrefixStrategy<PrefixCachePrebleStrategy>(deps, settings);
  }

  void score(RoutingInput& input) override {
    const PromptMatch& m = matchOf(input);
    const size_t n = input.candidates.size();
    const double tokens = static_cast<double>(m.prompt.engine_tokens);
    thread_local std::vector<double> cached, load;
    cached.resize(n);
    load.resize(n);
    windows_.read(input.candidates, input.now_ms, load);
    for (size_t i = 0; i < n; ++i) cached[i] = tokens * m.fraction(i);
    const double output = outputTokens(input.request);
    const double own_work = tokens + settings_.decode_token_cost * output;
    input.outcome = prebleScores(input.candidates, cached, tokens, load, output,
                                 {settings_.decode_token_cost, settings_.rebalance_ratio,
                                  settings_.rebalance_min_gap_requests * own_work});
  }

  void onPicked(RoutingInput& input, size_t chosen) override {
    if (input.dry_run) return;
    const PromptMatch& m = matchOf(input);
    const double tokens = static_cast<double>(m.prompt.engine_tokens);
    const double missed = tokens - tokens * m.fraction(chosen);
    const double cost = missed + settings_.decode_token_cost * outputTokens(input.request);
    windows_.add(input.candidates[chosen].pod_id, cost, input.now_ms);
  }

 private:
  double outputTokens(const openai::RequestView& request) const {
    return request.max_tokens ? request.max_tokens : settings_.default_output_tokens;
  }
  const Settings settings_;
  WindowLoads windows_;
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(prefix_cache_preble, PrefixCachePrebleStrategy)
