// throughput: the pod that would give this request the largest share of its output token rate, i.e. the highest
// capacity / (in_flight + 1), where capacity is the output tokens/s the gateway measured from the responses it
// relayed (EWMA, 10 s; pods without a value count as the mean of the others, or 1) and in_flight is counted at
// the moment of choice, this request included. Unlike load-balance it ignores the engine's queue and KV pressure
// (beyond the Router's KV-critical filter) and, among idle pods, prefers the fastest one.
#include "routing/load_score.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class ThroughputStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "throughput";
  void score(RoutingInput& input) override {
    const double fallback = fallbackCapacity(input.candidates);
    for (Candidate& c : input.candidates)
      c.score = capacityOf(c, fallback) / (static_cast<double>(c.in_flight) + 1);
  }
};

}  // namespace

}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(throughput, ThroughputStrategy)
