// least-latency: the pod whose recent time to first byte, as the gateway measured it (request start to the
// engine's first response byte; an EWMA over its answers, LatencyEstimate), is lowest. A pod's estimate
// fades by half every routing.strategies.least-latency.decay_half_life_ms since its last answer, so a pod that was
// slow once (a long prompt, a hiccup) and was avoided since is tried again instead of starved forever; a pod never
// measured counts as 0 and is tried first. Ties (all unmeasured) go to fewer in flight.
#include "config/yaml_reader.h"
#include "routing/load_score.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class LeastLatencyStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "least-latency";
  struct Settings {
    uint32_t decay_half_life_ms = 10000;
    void read(config::YamlReader& r) {
      r.read("decay_half_life_ms", decay_half_life_ms);
      if (decay_half_life_ms == 0) r.problem("decay_half_life_ms", "must be greater than 0");
    }
  };
  LeastLatencyStrategy(const StrategyDeps&, const Settings& settings) : settings_(settings) {}
  void score(RoutingInput& input) override {
    const int64_t now = input.now_ms;
    for (Candidate& c : input.candidates) {
      const LatencyEstimate::Sample s = c.pod->signals().latency().read();
      c.score = -estimatedSeconds(s, now, settings_.decay_half_life_ms);
      c.load_score = -c.score;  // shown by /debug/route
    }
  }

 private:
  Settings settings_;
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(least_latency, LeastLatencyStrategy)
