// prefix-cache: send each request to a pod that already holds the longest prefix of its prompt, weighed against
// load by one of two scorers (routing.prefix_cache.scorer):
// - wait: the request's estimated time to first token on each pod, from the pod's learned rates, plus the prefill
//   the choice adds to the fleet (waitScores): it stays on the pod holding its prefix until that pod's queue costs
//   more than a move; mostly new work is balanced over the window when the pods' loads are skewed (balanceNewWork);
// - blend: AIBrix's weighted blend of match and load (with routing.blend.prefill_cost_weight > 0 also prefill-cost's
//   cost), or AIBrix's standalone rule when routing.blend.load_balance_weight is 0.
// prefix-cache-wait and prefix-cache-blend are the two scorers under their own names, whatever the setting;
// prefix-cache is an alias, built as the one the setting names (its settings included) under its own name.
// Standard mode: the index records where the gateway routed each block. KV event mode: the engines' events say what
// they hold (PrefixServices::match).
#include "routing/prefix/prefix_strategy.h"
#include "routing/prefix/selection.h"
#include "routing/prefix/window_loads.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

enum class Scorer { kWait, kBlend };

// One strategy for the three names: the scorer is the instance's (the registry names each instance).
class PrefixCacheStrategy final : public PrefixStrategy {
 public:
  PrefixCacheStrategy(const config::Config& config, PrefixServices& services, Scorer scorer,
                      const PrefillCostSettings& prefill, const WaitSettings& wait)
      : PrefixStrategy(config, services),
        prefill_(prefill),
        wait_settings_(wait),
        wait_(scorer == Scorer::kWait),
        windows_(wait.window_ms) {}
  // The blend's prefill term weighs blocks as prefill-cost does (its settings read under its name, and checked there).
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps, Scorer scorer, const WaitSettings& wait) {
    PrefillCostSettings prefill;
    std::vector<std::string> ignored;
    readStrategySettings(deps.config, std::string(PrefillCostSettings::kStrategyName), prefill, ignored);
    return createPrefixStrategy<PrefixCacheStrategy>(deps, scorer, prefill, wait);
  }

  void score(RoutingInput& input) override {
    const PromptMatch& m = matchOf(input);
    if (wait_) return scoreWait(input, m);
    const auto& blend = config_.routing.blend;
    const size_t blocks = m.prompt.hashes.size();
    if (blend.load_balance_weight > 0) {
      std::span<const double> costs;
      if (blend.prefill_cost_weight > 0) {
        thread_local std::vector<double> cost_scratch;
        cost_scratch.resize(input.candidates.size());
        prefillCosts(input.candidates, m.matched, blocks, m.prompt.blockTokens(), prefill_.prefill_weight,
                     cost_scratch);
        costs = cost_scratch;
      }
      blendScores(input.candidates, m.matched, blocks, blend.prefix_cache_weight,
                  blend.prefix_cache_load_balance_weight, input.settings.load_balance, costs,
                  blend.prefill_cost_weight);
      input.outcome = {};
    } else {
      input.outcome = standaloneScores(input.candidates, m.matched, blocks, input.settings.standard_deviation_factor);
    }
  }

  void onPicked(RoutingInput& input, size_t chosen) override {
    if (input.outcome.empty()) input.outcome = outcomeOfBlend(input.candidates, chosen);
    if (wait_ && !input.dry_run) windows_.add(input.candidates[chosen].pod_id, 1, input.now_ms);
  }

 private:
  void scoreWait(RoutingInput& input, const PromptMatch& m) {
    const size_t n = input.candidates.size();
    thread_local std::vector<double> uncached;
    thread_local std::vector<ServiceRates::Rates> rates;
    uncached.resize(n);
    rates.resize(n);
    // An unusable prompt (no hashes) is predicted to miss everywhere: its estimated size.
    const double tokens =
        m.prompt.usable ? static_cast<double>(m.prompt.engine_tokens)
                        : static_cast<double>(estimatedPromptTokens(
                              input.request, services_.bytesPerToken().ratio(input.request.model)));
    for (size_t i = 0; i < n; ++i) uncached[i] = tokens * (1 - m.fraction(i));
    candidateRates(input.candidates, wait_settings_, rates, &services_.modelRates(), input.request.model);
    setMatchPercents(input.candidates, m.matched, m.prompt.hashes.size());
    // A match that counts on a busy slot (slot waits) waits for it first.
    waitScores(input.candidates, uncached, tokens, rates, wait_settings_.fleet_work_weight, input.explanations,
               m.slot_wait_s);
    // New work (no pod holds half of it) balances the requests sent over the window when they are skewed; the
    // window loads (under their mutex) are read only for new work.
    input.outcome = {};
    double best = 0;
    for (size_t i = 0; i < n; ++i) best = std::max(best, m.fraction(i));
    if (wait_settings_.rebalance_ratio <= 0 || best >= kNewWorkCachedShare) return;
    thread_local std::vector<double> load;
    load.resize(n);
    windows_.read(input.candidates, input.now_ms, load);
    if (balanceNewWork(input.candidates, best, load, wait_settings_.rebalance_ratio)) input.outcome = kPrebleRebalance;
  }

  PrefillCostSettings prefill_;
  WaitSettings wait_settings_;
  const bool wait_;
  WindowLoads windows_;  // the wait scorer's requests sent per pod over wait_settings_.window_ms
};

// The registrations: each name's factory (the registry builds one instance per name).
// prefix-cache-wait: its settings are routing.strategies.prefix-cache-wait, checked by the registry under that name.
struct PrefixCacheWait {
  static constexpr std::string_view kName = WaitSettings::kStrategyName;
  using Settings = WaitSettings;
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps, const Settings& wait) {
    return PrefixCacheStrategy::create(deps, Scorer::kWait, wait);
  }
};
struct PrefixCacheBlend {
  static constexpr std::string_view kName = "prefix-cache-blend";
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps) {
    return PrefixCacheStrategy::create(deps, Scorer::kBlend, WaitSettings{});
  }
};
// prefix-cache: the strategy routing.prefix_cache.scorer names, built as that one is but as an instance of its own
// answering to "prefix-cache" (the routing-strategy header, metrics; the wait scorer's window loads are its own).
struct PrefixCache {
  static constexpr std::string_view kName = "prefix-cache";
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps) {
    if (deps.config.routing.prefix_cache.scorer != "wait") return PrefixCacheBlend::create(deps);
    PrefixCacheWait::Settings wait;
    std::vector<std::string> ignored;  // checked under prefix-cache-wait's name
    readStrategySettings(deps.config, std::string(PrefixCacheWait::kName), wait, ignored);
    return PrefixCacheWait::create(deps, wait);
  }
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(prefix_cache, PrefixCache)
PREFIXGATE_STRATEGY(prefix_cache_wait, PrefixCacheWait)
PREFIXGATE_STRATEGY(prefix_cache_blend, PrefixCacheBlend)
