// prefix-cache: send each request to a pod that already holds the longest prefix of its prompt, weighed against
// load (the blend, by default) or by AIBrix's standalone rule when routing.blend.load_balance_weight is 0.
// Standard mode: the index records where the gateway routed each block. KV event mode: the engines' events say what
// they hold (PrefixServices::match).
#include <chrono>

#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/prefix/selection.h"
#include "routing/strategy_registry.h"
#include "util/scratch.h"

namespace prefixgate::routing {
namespace {

class PrefixCacheStrategy final : public Strategy {
 public:
  PrefixCacheStrategy(const config::Config& config, PrefixServices& services, PrefixMetrics& metrics)
      : config_(config), services_(services), metrics_(metrics) {}

  static constexpr std::string_view kName = "prefix-cache";
  // Null without the prefix services (unit tests of other strategies).
  static std::unique_ptr<Strategy> create(const StrategyDeps& deps) {
    if (!deps.prefix || !deps.prefix_metrics) return nullptr;
    return std::make_unique<PrefixCacheStrategy>(deps.config, *deps.prefix, *deps.prefix_metrics);
  }
  std::string_view name() const override { return kName; }
  bool wantsPromptTokens() const override { return true; }

  void score(RoutingInput& input) override {
    Scratch& s = scratch();
    s.started = std::chrono::steady_clock::now();
    util::releaseIfLarge(s.prompt.hashes);  // a huge previous prompt's hashes are not kept for ever
    services_.hashPrompt(input.request, s.prompt);
    s.matched.assign(input.candidates.size(), 0);
    // An unusable prompt (the engine's tokenizer did not answer) has no hashes: every match is 0, load decides.
    services_.match(input.request.model, s.prompt.hashes, input.candidates, s.pods, s.matched);
    const auto& blend = config_.routing.blend;
    const size_t blocks = s.prompt.hashes.size();
    if (blend.load_balance_weight > 0) {
      blendScores(input.candidates, s.matched, blocks, blend.prefix_cache_weight,
                  blend.prefix_cache_load_balance_weight, input.settings.load_balance);
      input.outcome = {};
    } else {
      input.outcome = standaloneScores(input.candidates, s.matched, blocks, input.settings.standard_deviation_factor);
    }
    input.details = {{"tokens", static_cast<int64_t>(s.prompt.tokens)}, {"blocks", static_cast<int64_t>(blocks)}};
  }

  void onPicked(RoutingInput& input, size_t chosen) override {
    Scratch& s = scratch();
    if (input.outcome.empty()) input.outcome = outcomeOfBlend(input.candidates, chosen);
    // What the chosen pod is predicted to hold, for the prediction audit (computed against the engine's answer).
    if (s.prompt.usable) input.predicted_cached_fraction = s.prompt.fraction(s.matched[chosen]);
    if (input.dry_run) return;
    const Candidate& pick = input.candidates[chosen];
    // Recorded before proxying, so the next request with the same prefix already follows this one.
    if (!s.prompt.hashes.empty() && !services_.recordRouted(input.request.model, s.prompt.hashes, *pick.pod))
      metrics_.error(input.request.model, "record_failed");
    // KV event mode: the blocks count for the pod until its engine begins the request (and publishes them).
    input.pending = services_.holdPending(input.request.model, s.prompt.hashes, pick.pod_id);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count();
    metrics_.decision(input.request.model, pick.match_percent, input.outcome, seconds);
  }

 private:
  // score() and onPicked() of one decision run back to back on the same thread: per-thread scratch carries the
  // hashes between them and keeps its capacity, so a decision allocates nothing once warm.
  struct Scratch {
    PromptBlocks prompt;
    std::vector<PodId> pods;
    std::vector<uint32_t> matched;
    std::chrono::steady_clock::time_point started;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  const config::Config& config_;
  PrefixServices& services_;
  PrefixMetrics& metrics_;
};

}  // namespace

}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(prefix_cache, PrefixCacheStrategy)
