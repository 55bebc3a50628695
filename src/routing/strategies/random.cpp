// random: every candidate equally likely.
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class RandomStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "random"; }
  void score(RoutingInput& input) override {
    std::uniform_real_distribution<double> dist(0.0, 1.0);
    for (Candidate& c : input.candidates) c.score = dist(input.rng);
  }
};

}  // namespace

void registerRandom(StrategyRegistry& registry) {
  registry.add("random", [](const StrategyDeps&) { return std::make_unique<RandomStrategy>(); });
}

}  // namespace prefixgate::routing
