// prefix-cache: send each request to a pod that already holds the longest prefix of its prompt, weighed against
// load by one of two scorers (routing.prefix_cache.scorer):
// - wait: the request's estimated time to first token on each pod, from the pod's learned rates, plus the prefill
//   the choice adds to the fleet (waitScores): it stays on the pod holding its prefix until that pod's queue costs
//   more than a move; mostly new work is balanced over the window when the pods' loads are skewed (balanceNewWork);
// - blend: AIBrix's weighted blend of match and load (with routing.blend.prefill_cost_weight > 0 also prefill-cost's
//   cost), or AIBrix's standalone rule when routing.blend.load_balance_weight is 0.
// prefix-cache-wait and prefix-cache-blend are the two scorers under their own names, whatever the setting.
// Standard mode: the index records where the gateway routed each block. KV event mode: the engines' events say what
// they hold (PrefixServices::match).
#include "routing/prefix/prefix_strategy.h"
#include "routing/prefix/selection.h"
#include "routing/prefix/window_loads.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

enum class Scorer { kConfigured, kWait, kBlend };

// prefix-cache-wait's settings are its own (routing.strategies.prefix-cache-wait, checked by the registry under that
// name); prefix-cache with scorer wait reads the same.
template <Scorer>
struct SettingsOf {};
template <>
struct SettingsOf<Scorer::kWait> {
  using Settings = WaitSettings;
};

template <Scorer kScorer>
class PrefixCacheStrategy final : public PrefixStrategy, public SettingsOf<kScorer> {
 public:
  static constexpr std::string_view kName = kScorer == Scorer::kWait    ? WaitSettings::kStrategyName
                                            : kScorer == Scorer::kBlend ? std::string_view("prefix-cache-blend")
                                                                        : std::string_view("prefix-cache");
  PrefixCacheStrategy(const config::Config& config, PrefixServices& services, const PrefillCostSettings& prefill,
                      const WaitSettings& wait)
      : PrefixStrategy(config, services),
        prefill_(prefill),
        wait_settings_(wait),
        wait_(kScorer == Scorer::kWait || (kScorer == Scorer::kConfigured && config.routing.prefix_cache.scorer == "wait")),
        windows_(wait.window_ms) {}
  // The blend's prefill term weighs blocks as prefill-cost does, the wait scorer's settings are prefix-cache-wait's
  // (each checked under its own name).
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps, const WaitSettings& wait) {
    PrefillCostSettings prefill;
    std::vector<std::string> ignored;
    readStrategySettings(deps.config, std::string(PrefillCostSettings::kStrategyName), prefill, ignored);
    return createPrefixStrategy<PrefixCacheStrategy>(deps, prefill, wait);
  }
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps) {
    WaitSettings wait;
    std::vector<std::string> ignored;
    readStrategySettings(deps.config, std::string(WaitSettings::kStrategyName), wait, ignored);
    return create(deps, wait);
  }
  std::string_view name() const override { return kName; }

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
    thread_local std::vector<discovery::ServiceRates::Rates> rates;
    uncached.resize(n);
    rates.resize(n);
    // An unusable prompt (no hashes) is predicted to miss everywhere: its estimated size.
    const double tokens =
        m.prompt.usable ? static_cast<double>(m.prompt.engine_tokens)
                        : static_cast<double>(estimatedPromptTokens(
                              input.request, services_.bytesPerToken().ratio(input.request.model)));
    for (size_t i = 0; i < n; ++i) uncached[i] = tokens * (1 - m.fraction(i));
    candidateRates(input.candidates, wait_settings_, rates);
    setMatchPercents(input.candidates, m.matched, m.prompt.hashes.size());
    waitScores(input.candidates, uncached, tokens, rates, wait_settings_.fleet_work_weight);
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

using PrefixCache = PrefixCacheStrategy<Scorer::kConfigured>;
using PrefixCacheWait = PrefixCacheStrategy<Scorer::kWait>;
using PrefixCacheBlend = PrefixCacheStrategy<Scorer::kBlend>;

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(prefix_cache, PrefixCache)
PREFIXGATE_STRATEGY(prefix_cache_wait, PrefixCacheWait)
PREFIXGATE_STRATEGY(prefix_cache_blend, PrefixCacheBlend)
