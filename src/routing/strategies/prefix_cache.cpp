// prefix-cache: send each request to a pod that already holds the longest prefix of its prompt, weighed against
// load (the blend, by default) or by AIBrix's standalone rule when routing.blend.load_balance_weight is 0.
// Standard mode: the index records where the gateway routed each block. KV event mode: the engines' events say what
// they hold (PrefixServices::match). With routing.blend.prefill_cost_weight > 0 the blend also weighs each pod's
// prefill cost (prefill-cost's rule).
#include "routing/prefix/prefix_strategy.h"
#include "routing/prefix/selection.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class PrefixCacheStrategy final : public PrefixStrategy {
 public:
  PrefixCacheStrategy(const config::Config& config, PrefixServices& services, PrefixMetrics& metrics,
                      const PrefillCostSettings& prefill)
      : PrefixStrategy(config, services, metrics), prefill_(prefill) {}
  static constexpr std::string_view kName = "prefix-cache";
  // The blend's prefill term weighs blocks as prefill-cost does (its settings, checked under its name).
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps) {
    PrefillCostSettings prefill;
    std::vector<std::string> ignored;
    readStrategySettings(deps.config, std::string(PrefillCostSettings::kStrategyName), prefill, ignored);
    return createPrefixStrategy<PrefixCacheStrategy>(deps, prefill);
  }
  std::string_view name() const override { return kName; }

  void score(RoutingInput& input) override {
    Match& m = hashAndMatch(input);
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
    recordPick(input, chosen);
  }

 private:
  PrefillCostSettings prefill_;
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(prefix_cache, PrefixCacheStrategy)
