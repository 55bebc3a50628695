#pragma once
// Routing one request: resolve the strategy (locked > header > profile > default), filter the ready pods that
// serve the model, let the strategy score them, pick the best, and count the request against the pick at once.
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "openai/errors.h"
#include "openai/request.h"
#include "routing/prefix/prefix_services.h"
#include "routing/strategy_registry.h"
#include "routing/ticket.h"
#include "tokenize/token_bytes.h"

namespace prefixgate::routing {

struct CandidateFilter;
struct FilteredCandidates;
struct ServingPods;

// Typed outcomes; each maps to one gateway error (errorFor), hence one HTTP status and OpenAI error type.
enum class RouteFailure { kNone, kUnknownStrategy, kModelNotServed, kNoReadyPod, kAllOverloaded };
openai::GatewayError errorFor(RouteFailure f);  // the gateway error it is answered with (openai/errors.h)

struct RouteQuery {
  const openai::RequestView& request;
  std::string_view header_strategy;  // `routing-strategy` header, "" when absent
  std::string_view config_profile;   // `config-profile` header, "" when absent
  std::span<const PodId> exclude;    // pods already tried for this request
  bool dry_run = false;              // decide without recording anything (and without counting in-flight)
  // Disaggregated prefill/decode: the leg this decision is for (kPrefill, kDecode), or kBoth for a whole request.
  PodRole leg = PodRole::kBoth;
  // A pod that must be chosen whenever it is a candidate (the Responses API's chain affinity: the pod holding the
  // stored response the request continues); the strategy still scores, so matches, explanations and the prompt's
  // record are the chosen pod's. "" = none: the strategy's best is chosen.
  std::string_view preferred_pod = {};
  // The request may wait at the gateway for a slot engine's busy slot holding its prefix (slot waits,
  // routing.prefix_cache.slot_wait_ms): a whole request's first decision, not a failover's.
  bool may_wait_for_slot = false;
};

// A request's strategy, resolved once (locked > header > profile > model > default; one that matches prompts becomes
// routing.load_only_strategy for an endpoint with no prompt to match: openai::matchesPrompt) with the settings of its model
// and profile: what the session prepares for (the remote tokenizer, when the strategy matches the prompt) and what
// choose() applies. A value; a failed-over request keeps its plan.
struct RoutePlan {
  Strategy* strategy = nullptr;  // null: the name resolved to is unknown (message says so; choose() answers 400)
  std::string_view name;         // the strategy's registered name ("" when unknown)
  RequestSettings settings;
  std::string message;
  // The leg it chooses a pod for (RouteQuery::leg): kPrefill -> prefill and both pods; kDecode -> decode and both
  // pods; kBoth (a whole request) -> every pod, but prefill pods of a disaggregated model.
  PodRole leg = PodRole::kBoth;
  // The strategy matches the prompt (Strategy::wantsPromptMatch): the remote tokenizer is asked first.
  bool wantsPromptTokens() const { return strategy && strategy->wantsPromptMatch(); }
};

struct Decision {
  Decision() = default;
  Decision(Decision&&) noexcept = default;
  Decision& operator=(Decision&&) noexcept = default;
  ~Decision();  // gives the candidates' capacity back to the thread (util::VectorPool) for the next decision

  RouteFailure failure = RouteFailure::kNone;
  std::string message;                  // for the client when failure != kNone
  discovery::PodPtr pod;                // the chosen pod
  std::string strategy;                 // the strategy applied
  int match_percent = -1;               // the chosen pod's prefix match, when a prefix strategy ran
  std::string_view outcome;             // strategy-specific selection label ("" = none)
  std::vector<Candidate> candidates;    // every scored candidate (for /debug/route)
  // Dry runs: per scored candidate (candidates' order; the excluded have none), the scorer's explanation.
  std::vector<Explanation> explanations;
  // Facts the strategy computed (tokens, blocks): dry runs (/debug/route) only.
  std::vector<std::pair<std::string, int64_t>> details;
  RoutePlan plan;                       // kept for failover (chooseAgain)
  std::shared_ptr<PromptMatch> prompt;  // the prompt's blocks and match, when the strategy matches the prompt
  // The decision's feedback path (firstByte, attemptFailed, completed) and what it counts against the pod; not
  // in dry runs.
  Ticket ticket;
};

class Router {
 public:
  using NowMs = std::function<int64_t()>;
  // Builds every strategy of `registry` with `deps` (deps.config must outlive the router).
  Router(const StrategyRegistry& registry, const StrategyDeps& deps, const discovery::PodRegistry& pods, NowMs now_ms);

  // The strategy and settings `query` resolves to. Thread-safe.
  RoutePlan plan(const RouteQuery& query) const;
  // The decode leg's plan for `query`'s request: disaggregation.decode_strategy (by load, never by prefix) with the
  // request's model and profile settings.
  RoutePlan decodePlan(const RouteQuery& query) const;
  // Whether `model`'s requests are split into a prefill leg and a decode leg (discovery::PodSet::disaggregated).
  bool disaggregated(std::string_view model) const;
  // The longest a request waits for a slot engine's busy slot its decision queued it for (slot waits; 0 = off).
  std::chrono::milliseconds slotWait() const;
  // Whether every ready pod that takes `model`'s prefill legs has at least `in_flight` requests in flight (all
  // replicas): the prefill side is saturated (disaggregation.max_prefill_in_flight). False with no such pod.
  bool prefillPoolBusy(std::string_view model, uint32_t in_flight) const;
  // Filters the pods, hashes and matches the prompt when the plan's strategy wants it, lets the strategy score,
  // picks the best and, unless a dry run, counts the request against it and records the prompt for it (the ticket
  // holds both). Thread-safe; never blocks. `rng` is the calling thread's generator.
  Decision choose(const RoutePlan& plan, const RouteQuery& query, std::mt19937_64& rng);
  Decision choose(const RouteQuery& query, std::mt19937_64& rng) { return choose(plan(query), query, rng); }
  // Failover: another pod for the request of `failed` (its attempt failed; tell its ticket first), excluding
  // `query.exclude`: the same plan, and the same prompt blocks matched against the pods left (not hashed again).
  Decision chooseAgain(Decision& failed, const RouteQuery& query, std::mt19937_64& rng);
  // The decode leg of a request whose prefill leg is `prefill`: a decode (or both) pod by decodePlan, which then
  // holds the prompt: the blocks the prefill pod computed are recorded for it too (it received them), and taken back
  // if its attempt fails before it computed anything. Failover (chooseAgain) keeps both.
  Decision chooseDecode(const RouteQuery& query, const Decision& prefill, std::mt19937_64& rng);

  std::vector<std::string> strategyNames() const;

 private:
  Decision decide(const RoutePlan& plan, const RouteQuery& query, std::mt19937_64& rng,
                  std::shared_ptr<PromptMatch> prompt);
  // Above routing.max_scored_pods pods serving the leg (and for a strategy that scoresSample): the sampled
  // candidates into `out` (pod_sample.h) and, for a prefix strategy, the prompt hashed (unless given) and matched
  // for each. Returns the pods drawn from, or null (nothing done but perhaps the hash) when every pod is filtered.
  const ServingPods* sample(const RoutePlan& plan, const RouteQuery& query,
                            const std::shared_ptr<const discovery::PodSet>& snapshot, const CandidateFilter& filter,
                            std::mt19937_64& rng, FilteredCandidates& out, std::shared_ptr<PromptMatch>& prompt);
  // The prompt step of a prefix strategy's decision, after the pick: the prediction, and unless a dry run the
  // record, the KV event hold and the prefix metrics.
  void recordPrompt(const RouteQuery& query, Decision& d, const Candidate& pick, size_t chosen, double started_s);
  // The prompt's slot_wait_s, emptied, for match() to fill when the query may wait for a slot and slot waits are
  // on; else null (nothing waits).
  std::vector<double>* slotWaits(const RouteQuery& query, PromptMatch& prompt) const;
  // A decode leg's pick receives the prompt the prefill pod computed: recorded for it (as it will hold it), with
  // what it held of it before as the blocks a failed attempt keeps.
  void recordTransferred(const RouteQuery& query, Decision& d, const Candidate& pick,
                         std::shared_ptr<PromptMatch> prompt);
  const config::Config& config_;
  PrefixServices* prefix_;         // prompts' hashes, matches and records (null in tests without prefix services)
  PrefixMetrics* prefix_metrics_;  // the aibrix_prefix_cache_* series (null with prefix_)
  const discovery::PodRegistry& pods_;
  NowMs now_ms_;
  std::map<std::string, std::unique_ptr<Strategy>, std::less<>> strategies_;
};

// The filter every decision runs before its strategy (public for tests; Router::choose fills it from the config).
struct CandidateFilter {
  int64_t now_ms = 0;                    // steady clock (ejection deadlines)
  int64_t max_engine_age_ms = 0;         // engine metrics older than this count as unknown
  int32_t max_in_flight_per_pod = 0;     // limits.max_in_flight_per_pod; 0 = no bound
  uint32_t panic_threshold_percent = 0;  // health_check.panic_threshold_percent
  std::span<const PodId> exclude;        // pods already tried for this request
  PodRole leg = PodRole::kBoth;          // the plan's leg: pods of another role are left out
  bool disaggregated = false;            // the model is disaggregated: whole requests skip its prefill pods
  config::LoadBalanceConfig load_balance;      // the request's (per-model) capacity-aware score settings
  config::LoadImbalanceConfig load_imbalance;  // routing.load_imbalance
};
struct FilteredCandidates {
  std::vector<Candidate> candidates;  // what the strategy scores; empty = none (see full)
  std::vector<Candidate> excluded;    // KV-critical pods left out (shown by /debug/route, marked excluded)
  size_t full = 0;                    // pods left out for having max_in_flight_per_pod requests in flight
};
// Whether a pod of `role` serves `leg` (CandidateFilter::leg) of a request of a model that is `disaggregated` or not.
bool servesLeg(PodRole role, PodRole leg, bool disaggregated);

// Ready pods (in panic: healthy and not removed) of the leg's roles, not in `exclude` and under the per-pod bound, each read once
// (in-flight counts of every replica, in-flight tokens, fresh engine load, capacity-aware load_score); then pods
// whose KV cache is nearly full leave unless every pod's is, and the load-imbalance gate keeps only the least
// loaded when counts are severely skewed. Pure over the pods' current state.
FilteredCandidates filterCandidates(std::span<const discovery::PodPtr> serving, const CandidateFilter& filter);

// The prefill tokens queued at the candidate's engine by others (other replicas, clients sent to it directly): its
// engine-reported waiting requests beyond this gateway's own not yet begun, each at this gateway's mean queued
// request there (none queued: `prompt_tokens`, this request's size). 0 when the engine reports none.
double queuedElsewhere(const Candidate& c, double prompt_tokens);

// A request's prompt tokens when no strategy tokenized it: its token ids when it has them (its own or the
// engine's), else its prompt text at `bytes_per_token` (the model's learned BytesPerToken ratio where known).
int64_t estimatedPromptTokens(const openai::RequestView& request,
                              double bytes_per_token = tokenize::kDefaultBytesPerToken);

// Panic routing (health_check.panic_threshold_percent): true when fewer than that share of the model's pods that
// are not removed are ready. The router then ignores passive ejections: failures seen by the relay must not leave
// a model without pods. Pods failing their active health checks stay out (their engines say they are down, and a
// clear 503 beats a slower 502).
bool panicking(std::span<const discovery::PodPtr> serving, uint32_t threshold_percent, int64_t now_ms);

// Milliseconds on the steady clock (the time base of pod ejection deadlines).
int64_t steadyNowMs();

}  // namespace prefixgate::routing
