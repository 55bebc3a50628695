#pragma once
// What every prefix strategy (prefix-cache, prefill-cost, prefix-cache-preble) does around its own rule: hash the
// prompt and match it against each candidate before scoring, and after the pick record the prompt for the chosen
// pod (so the next request with the same prefix follows it), hold its blocks until the engine begins (KV event
// mode), and count the decision in the prefix metrics. A strategy derives from PrefixStrategy, calls
// hashAndMatch() first in score() and recordPick() in onPicked().
#include <chrono>
#include <memory>
#include <span>
#include <vector>

#include "prefixgate/strategy.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {

class PrefixStrategy : public Strategy {
 public:
  PrefixStrategy(const config::Config& config, PrefixServices& services, PrefixMetrics& metrics)
      : config_(config), services_(services), metrics_(metrics) {}
  bool wantsPromptTokens() const override { return true; }

 protected:
  // One decision's prompt and matches. score() and onPicked() of one decision run back to back on the same thread:
  // per-thread scratch carries them between the two and keeps its capacity, so a decision allocates nothing once
  // warm.
  struct Match {
    PromptBlocks prompt;
    std::vector<PodId> pods;
    std::vector<uint32_t> matched;  // per candidate, blocks of prompt.hashes it is predicted to hold
    std::chrono::steady_clock::time_point started;
  };
  // Hashes the request's prompt and matches it against every candidate (an unusable prompt, whose engine
  // tokenizer did not answer, has no hashes: every match is 0). Sets input's prompt_tokens and its details.
  Match& hashAndMatch(RoutingInput& input);
  // The current decision's Match (after hashAndMatch, on the same thread).
  static Match& current();
  // After the pick: the prediction for the audit, and unless a dry run the record, the pending hold and the metric.
  void recordPick(RoutingInput& input, size_t chosen);

  const config::Config& config_;
  PrefixServices& services_;
  PrefixMetrics& metrics_;
};

// The factory of a prefix strategy S (constructed from (config, services, metrics[, settings])): null without the
// prefix services (unit tests of other strategies).
template <class S, class... Extra>
std::unique_ptr<Strategy> createPrefixStrategy(const StrategyDeps& deps, const Extra&... extra) {
  if (!deps.prefix || !deps.prefix_metrics) return nullptr;
  return std::make_unique<S>(deps.config, *deps.prefix, *deps.prefix_metrics, extra...);
}

}  // namespace prefixgate::routing
