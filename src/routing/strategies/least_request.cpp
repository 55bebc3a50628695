// least-request: the pod with the fewest requests in flight from this gateway (counted at the moment of choice,
// so a burst spreads instead of landing on the pod that looked idle to every request of the burst).
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class LeastRequestStrategy final : public Strategy {
 public:
  std::string_view name() const override { return "least-request"; }
  void score(RoutingInput& input) override {
    for (Candidate& c : input.candidates) c.score = -static_cast<double>(c.in_flight);
  }
};

}  // namespace

void registerLeastRequest(StrategyRegistry& registry) {
  registry.add("least-request", [](const StrategyDeps&) { return std::make_unique<LeastRequestStrategy>(); });
}

}  // namespace prefixgate::routing
