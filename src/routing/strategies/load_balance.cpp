// load-balance: the pod with the lowest capacity-aware load score (reference: aibrix-behaviour.md),
// (running + lambda * waiting) / capacity * (1 + alpha * (1 - kv_free)^2), where running is the gateway's
// in-flight count taken at the moment of choice (so a burst spreads before any engine metric moves), waiting and
// KV usage come from the engine's /metrics, and capacity is the output tokens/s the gateway measured (pods
// without a value count as the mean of the others). Knobs: routing.load_balance, per model and profile.
#include "routing/load_score.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class LoadBalanceStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "load-balance";
  void score(RoutingInput& input) override {
    ensureLoadScores(input.candidates, input.settings.load_balance);
    // Infinite (KV nearly full; only when every pod is) gives -inf to all: the Router then prefers fewer in flight.
    for (Candidate& c : input.candidates) c.score = 0.0 - c.load_score;  // not -x: no "-0" in /debug/route
  }
};

}  // namespace

}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(load_balance, LoadBalanceStrategy)
