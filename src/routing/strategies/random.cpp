// random: every candidate equally likely.
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class RandomStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "random";
  void score(RoutingInput& input) override {
    std::uniform_real_distribution<double> dist(0.0, 1.0);
    for (Candidate& c : input.candidates) c.score = dist(input.rng);
  }
};

}  // namespace

}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(random, RandomStrategy)
