// power-of-two: two candidates drawn at random, the one with fewer requests in flight wins (ties: either). Old
// or shared load information (several replicas, counts a moment old) makes "the least loaded of all" send every
// decision of that moment to the same pod; two random choices keep most of the balance without that herd
// (Mitzenmacher, "The Power of Two Choices in Randomized Load Balancing").
//
// This file is the one to copy for a new strategy: the class with its kName, score() (and onPicked() when it
// records something), and the PREFIXGATE_STRATEGY line at the end. See least_latency.cpp for one with settings.
#include <limits>

#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class PowerOfTwoStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "power-of-two";
  void score(RoutingInput& input) override {
    std::span<Candidate> c = input.candidates;
    for (Candidate& each : c) each.score = std::numeric_limits<double>::lowest();  // not drawn: never picked
    if (c.size() == 1) {
      c[0].score = -static_cast<double>(c[0].in_flight);
      return;
    }
    std::uniform_int_distribution<size_t> first(0, c.size() - 1);
    std::uniform_int_distribution<size_t> second(0, c.size() - 2);
    const size_t a = first(input.rng);
    size_t b = second(input.rng);
    if (b >= a) ++b;  // two distinct candidates, each pair equally likely
    c[a].score = -static_cast<double>(c[a].in_flight);
    c[b].score = -static_cast<double>(c[b].in_flight);
  }
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(power_of_two, PowerOfTwoStrategy)
