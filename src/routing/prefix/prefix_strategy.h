#pragma once
// What every prefix strategy (prefix-cache, prefill-cost, prefix-cache-preble) shares: it scores on the prompt's
// match, which the Router makes before score() (RoutingInput::match: the prompt's blocks and, per candidate, the
// blocks its pod is predicted to hold); after the pick the Router records the prompt for the chosen pod (so the
// next request with the same prefix follows it), holds its blocks until the engine begins (KV event mode) and
// counts the decision in the prefix metrics. A strategy derives from PrefixStrategy and implements score().
#include <memory>

#include "prefixgate/strategy.h"
#include "routing/prefix/prefix_services.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {

class PrefixStrategy : public Strategy {
 public:
  PrefixStrategy(const config::Config& config, PrefixServices& services) : config_(config), services_(services) {}
  bool wantsPromptMatch() const override { return true; }

 protected:
  // The decision's match (the Router always makes one for a strategy that wants it).
  static const PromptMatch& matchOf(const RoutingInput& input) { return *input.match; }

  const config::Config& config_;
  PrefixServices& services_;
};

// The factory of a prefix strategy S (constructed from (config, services[, settings])): null without the prefix
// services (unit tests of other strategies).
template <class S, class... Extra>
std::unique_ptr<Strategy> createPrefixStrategy(const StrategyDeps& deps, const Extra&... extra) {
  if (!deps.prefix || !deps.prefix_metrics) return nullptr;
  return std::make_unique<S>(deps.config, *deps.prefix, extra...);
}

}  // namespace prefixgate::routing
