// least-request: the pod with the fewest requests in flight from this gateway (counted at the moment of choice,
// so a burst spreads instead of landing on the pod that looked idle to every request of the burst).
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class LeastRequestStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "least-request";
  void score(RoutingInput& input) override {
    for (Candidate& c : input.candidates) c.score = -static_cast<double>(c.in_flight);
  }
};

}  // namespace

}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(least_request, LeastRequestStrategy)
