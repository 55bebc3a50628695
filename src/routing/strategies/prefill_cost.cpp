// prefill-cost (the rule of NVIDIA Dynamo's KV router): the pod where this request costs least, in KV blocks:
// routing.strategies.prefill-cost.prefill_weight x the prompt blocks it would have to compute (all minus those it
// is predicted to hold, matched like prefix-cache) + the blocks of context it is already serving (the prompt tokens
// of its requests in flight, counted from the moment of choice to the end of each response). Cache affinity and
// load in one number: a warm pod wins until the context it serves outweighs the prefill it saves. Ties: fewer in
// flight, then at random. The same cost is a scorer of prefix-cache's blend (routing.blend.prefill_cost_weight).
#include "routing/prefix/prefix_strategy.h"
#include "routing/prefix/selection.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class PrefillCostStrategy final : public PrefixStrategy {
 public:
  static constexpr std::string_view kName = PrefillCostSettings::kStrategyName;
  using Settings = PrefillCostSettings;
  PrefillCostStrategy(const config::Config& config, PrefixServices& services, const Settings& settings)
      : PrefixStrategy(config, services), settings_(settings) {}
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps, const Settings& settings) {
    return createPrefixStrategy<PrefillCostStrategy>(deps, settings);
  }

  void score(RoutingInput& input) override {
    const PromptMatch& m = matchOf(input);
    const size_t blocks = m.prompt.hashes.size();
    thread_local std::vector<double> costs;
    costs.resize(input.candidates.size());
    prefillCosts(input.candidates, m.matched, blocks, m.prompt.blockTokens(), settings_.prefill_weight, costs);
    setMatchPercents(input.candidates, m.matched, blocks);
    for (size_t i = 0; i < input.candidates.size(); ++i) {
      input.candidates[i].load_score = costs[i];  // shown by /debug/route
      input.candidates[i].score = -costs[i];
    }
  }

 private:
  Settings settings_;
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(prefill_cost, PrefillCostStrategy)
