#include "routing/router.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "openai/errors.h"
#include "routing/load_score.h"
#include "routing/pod_sample.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "util/thread_spares.h"

namespace prefixgate::routing {

openai::GatewayError errorFor(RouteFailure f) {
  switch (f) {
    case RouteFailure::kUnknownStrategy: return openai::GatewayError::kUnknownStrategy;
    case RouteFailure::kModelNotServed: return openai::GatewayError::kModelNotServed;
    case RouteFailure::kAllOverloaded: return openai::GatewayError::kAllPodsBusy;
    case RouteFailure::kNoReadyPod:
    case RouteFailure::kNone: break;
  }
  return openai::GatewayError::kNoReadyPod;
}

double queuedElsewhere(const Candidate& c, double prompt_tokens) {
  const double others = c.waiting - static_cast<double>(c.prefill_requests);
  if (!(others > 0)) return 0;
  const double per_request = c.prefill_requests > 0 ? c.prefill_tokens / c.prefill_requests : prompt_tokens;
  return others * per_request;
}

int64_t estimatedPromptTokens(const openai::RequestView& request, double bytes_per_token) {
  if (request.remote_token_ids) return static_cast<int64_t>(request.remote_token_ids->size());
  if (request.has_token_ids) return static_cast<int64_t>(request.prompt_token_ids.size());
  if (!(bytes_per_token > 0)) bytes_per_token = tokenize::kDefaultBytesPerToken;
  return static_cast<int64_t>(std::ceil(static_cast<double>(request.prompt_text.size()) / bytes_per_token));
}

int64_t steadyNowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

Router::Router(const StrategyRegistry& registry, const StrategyDeps& deps, const discovery::PodRegistry& pods,
               NowMs now_ms)
    : config_(deps.config),
      prefix_(deps.prefix_metrics ? deps.prefix : nullptr),
      prefix_metrics_(deps.prefix ? deps.prefix_metrics : nullptr),
      pods_(pods),
      now_ms_(std::move(now_ms)),
      strategies_(registry.createAll(deps)) {}

std::vector<std::string> Router::strategyNames() const {
  std::vector<std::string> out;
  for (const auto& [name, s] : strategies_) out.push_back(name);
  return out;
}

RoutePlan Router::plan(const RouteQuery& query) const {
  RoutePlan plan;
  RequestSettings& settings = plan.settings;
  settings.standard_deviation_factor = config_.routing.prefix_cache.standard_deviation_factor;
  settings.load_balance = config_.routing.load_balance;
  std::string_view name = config_.routing.strategy;
  const config::ModelConfig* model = nullptr;
  if (auto it = config_.models.find(query.request.model); it != config_.models.end()) model = &it->second;
  const config::ModelProfile* profile = nullptr;
  if (model && !query.config_profile.empty()) {
    if (auto it = model->profiles.find(std::string(query.config_profile)); it != model->profiles.end()) profile = &it->second;
  }
  if (model) {
    if (model->standard_deviation_factor) settings.standard_deviation_factor = *model->standard_deviation_factor;
    settings.load_balance = model->load_balance.over(settings.load_balance);
    if (!model->routing_strategy.empty()) name = model->routing_strategy;
  }
  if (profile) {
    if (profile->standard_deviation_factor) settings.standard_deviation_factor = *profile->standard_deviation_factor;
    settings.load_balance = profile->load_balance.over(settings.load_balance);
    if (!profile->routing_strategy.empty()) name = profile->routing_strategy;
  }
  if (!query.header_strategy.empty()) name = query.header_strategy;
  if (model && !model->locked_routing_strategy.empty()) name = model->locked_routing_strategy;
  plan.leg = query.leg;

  if (auto it = strategies_.find(name); it != strategies_.end()) {
    plan.strategy = it->second.get();
    plan.name = it->first;
    // A request with no prompt to match (rerank, score) goes by load: a prefix strategy would hash text no engine
    // caches as a prefix and pin identical requests to one pod.
    if (plan.strategy->wantsPromptMatch() && !openai::matchesPrompt(query.request.endpoint)) {
      if (auto load = strategies_.find(config_.routing.load_only_strategy); load != strategies_.end()) {
        plan.strategy = load->second.get();
        plan.name = load->first;
      } else {
        // --check refuses it: only a router built on an unchecked config gets here.
        plan.strategy = nullptr;
        plan.name = {};
        plan.message = "routing.load_only_strategy '" + config_.routing.load_only_strategy + "' is not a routing strategy";
      }
    }
    return plan;
  }
  plan.message = "unknown routing strategy '" + openai::printable(name, 64) + "' (valid: ";
  bool first = true;
  for (const auto& [n, s] : strategies_) {
    plan.message += (first ? "" : ", ") + n;
    first = false;
  }
  plan.message += ")";
  return plan;
}

RoutePlan Router::decodePlan(const RouteQuery& query) const {
  RoutePlan plan = this->plan(query);  // the model's and profile's settings
  plan.leg = PodRole::kDecode;
  const std::string& name = config_.disaggregation.decode_strategy;
  if (auto it = strategies_.find(name); it != strategies_.end()) {
    plan.strategy = it->second.get();
    plan.name = it->first;
    plan.message.clear();
  } else {
    // --check refuses it: only a router built on an unchecked config gets here.
    plan.strategy = nullptr;
    plan.name = {};
    plan.message = "disaggregation.decode_strategy '" + name + "' is not a routing strategy";
  }
  return plan;
}

bool Router::disaggregated(std::string_view model) const { return pods_.snapshot()->disaggregated(model); }

bool Router::prefillPoolBusy(std::string_view model, uint32_t in_flight) const {
  auto snapshot = pods_.snapshot();
  const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(model);
  if (!serving) return false;
  const int64_t now = now_ms_();
  bool any = false;
  for (const discovery::PodPtr& pod : *serving) {
    if (!servesLeg(pod->spec().role, PodRole::kPrefill, true) || !pod->ready(now)) continue;
    if (pod->signals().inFlightAllReplicas() < static_cast<int32_t>(in_flight)) return false;
    any = true;
  }
  return any;
}

Decision Router::chooseDecode(const RouteQuery& query, const Decision& prefill, std::mt19937_64& rng) {
  return decide(decodePlan(query), query, rng, prefill.prompt);
}

Decision::~Decision() { util::VectorPool<Candidate>::give(std::move(candidates)); }

Decision Router::choose(const RoutePlan& plan, const RouteQuery& query, std::mt19937_64& rng) {
  return decide(plan, query, rng, nullptr);
}

Decision Router::chooseAgain(Decision& failed, const RouteQuery& query, std::mt19937_64& rng) {
  return decide(failed.plan, query, rng, failed.prompt);
}

Decision Router::decide(const RoutePlan& plan, const RouteQuery& query, std::mt19937_64& rng,
                        std::shared_ptr<PromptMatch> prompt) {
  Decision d;
  d.plan = plan;
  Strategy* strategy = plan.strategy;
  if (!strategy) {
    d.failure = RouteFailure::kUnknownStrategy;
    d.message = plan.message;
    return d;
  }
  d.strategy = plan.name;

  auto snapshot = pods_.snapshot();
  const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(query.request.model);
  if (!serving) {
    d.failure = RouteFailure::kModelNotServed;
    // The name is the client's: cut, so an error never echoes megabytes back.
    d.message = "the model '" + openai::printable(query.request.model, 256) + "' does not exist or no pod serves it";
    return d;
  }
  const int64_t now = now_ms_();
  CandidateFilter filter;
  filter.now_ms = now;
  filter.max_engine_age_ms = engine::maxEngineMetricsAgeMs(config_.engine_metrics.scrape_interval_ms,
                                                           config_.engine_metrics.scrape_timeout_ms);
  filter.max_in_flight_per_pod = static_cast<int32_t>(config_.limits.max_in_flight_per_pod);
  filter.panic_threshold_percent = config_.health_check.panic_threshold_percent;
  filter.exclude = query.exclude;
  filter.leg = plan.leg;
  filter.disaggregated = filter.leg == PodRole::kBoth && snapshot->disaggregated(query.request.model);
  filter.load_balance = plan.settings.load_balance;
  filter.load_imbalance = config_.routing.load_imbalance;
  // A large fleet's decision scores a sample (pod_sample.h): the prompt is hashed and matched over every pod
  // first, to know which pods hold a prefix of it. The prefix metrics time the decision from the hash.
  auto started = std::chrono::steady_clock::now();
  FilteredCandidates filtered;
  const ServingPods* sampled = sample(plan, query, snapshot, filter, rng, filtered, prompt);
  if (!sampled) {
    filtered = filterCandidates(*serving, filter);
    started = std::chrono::steady_clock::now();
  }
  std::vector<Candidate>& candidates = filtered.candidates;
  if (candidates.empty() && filtered.full > 0) {
    d.failure = RouteFailure::kAllOverloaded;
    d.message = "every pod serving the model '" + query.request.model +
                "' has limits.max_in_flight_per_pod requests in flight; retry later";
    return d;
  }
  if (candidates.empty()) {
    d.failure = RouteFailure::kNoReadyPod;
    const std::string_view leg = plan.leg == PodRole::kPrefill ? "prefill " : plan.leg == PodRole::kDecode ? "decode " : "";
    d.message = "no ready " + std::string(leg) + "pod serves the model '" + query.request.model + "'";
    return d;
  }

  // A strategy that matches the prompt gets it hashed (once per request: failover keeps the blocks) and matched
  // against every candidate before it scores (a sampled decision did both above).
  if (prefix_ && strategy->wantsPromptMatch()) {
    if (!sampled) {
      if (!prompt) {
        prompt = newPromptMatch();
        prefix_->hashPrompt(query.request, prompt->prompt, candidates);
      }
      prompt->matched.assign(candidates.size(), 0);
      prefix_->match(query.request.model, prompt->prompt, candidates, prompt->pods, prompt->matched,
                     slotWaits(query, *prompt));
    }
    d.prompt = std::move(prompt);
  }
  RoutingInput input{query.request, candidates, plan.settings, rng, query.dry_run, now, d.prompt.get()};
  if (query.dry_run) {
    d.explanations.assign(candidates.size(), Explanation{});
    input.explanations = d.explanations;
  }
  if (d.prompt && query.dry_run) {  // shown by /debug/route only
    const PromptBlocks& p = d.prompt->prompt;
    input.details = {{"tokens", static_cast<int64_t>(p.tokens)},
                     {"engine_tokens", static_cast<int64_t>(p.engine_tokens)},
                     {"blocks", static_cast<int64_t>(p.hashes.size())}};
  }
  strategy->score(input);

  size_t best = pickBest(candidates, rng);
  if (!query.preferred_pod.empty()) {
    for (size_t i = 0; i < candidates.size(); ++i)
      if (candidates[i].pod->name() == query.preferred_pod) best = i;
  }
  const Candidate& pick = candidates[best];
  if (sampled) {
    d.pod = sampled->pods[sampled->position.at(pick.pod)];
  } else {
    for (const discovery::PodPtr& pod : *serving)
      if (pod.get() == pick.pod) d.pod = pod;
  }
  // The per-pod bound was read when the candidates were; it is taken now. A pod another thread filled in between
  // is left out and the request decided again among the others (at most once per candidate: each pass excludes one).
  const bool counted = !query.dry_run && filter.max_in_flight_per_pod > 0;
  if (counted && !d.pod->signals().tryAddInFlight(filter.max_in_flight_per_pod)) {
    std::vector<PodId> exclude(query.exclude.begin(), query.exclude.end());
    exclude.push_back(d.pod->id());
    RouteQuery again = query;
    again.exclude = exclude;
    return decide(plan, again, rng, d.prompt ? std::move(d.prompt) : std::move(prompt));
  }
  strategy->onPicked(input, best);

  Ticket& t = d.ticket;
  t.facts_.model = query.request.model;
  t.facts_.stream = query.request.stream;
  d.outcome = input.outcome;
  if (d.prompt) recordPrompt(query, d, pick, best, std::chrono::duration<double>(started.time_since_epoch()).count());
  else if (prompt && prefix_ && plan.leg == PodRole::kDecode) recordTransferred(query, d, pick, std::move(prompt));
  // Counted at the moment of choice, so the next decision (on any thread) already sees it.
  const int64_t tokens =
      t.facts_.prompt_tokens >= 0
          ? t.facts_.prompt_tokens
          : estimatedPromptTokens(query.request, prefix_ ? prefix_->bytesPerToken().ratio(query.request.model)
                                                         : tokenize::kDefaultBytesPerToken);
  t.facts_.prompt_tokens = tokens;
  const double predicted = t.facts_.predicted_cached_fraction;
  const int64_t to_prefill =
      std::isnan(predicted) ? tokens
                            : std::min(tokens, static_cast<int64_t>(std::lround(static_cast<double>(tokens) * (1 - predicted))));
  // What the pod had to do when the request was sent, for learning its rates from the response's first byte.
  t.facts_.sent = {pick.prefill_tokens + queuedElsewhere(pick, tokens), static_cast<double>(to_prefill),
                   static_cast<double>(std::max(0, pick.in_flight - pick.prefill_requests))};
  if (!query.dry_run) {
    t.pod_ = d.pod;
    t.strategy_ = strategy;
    t.now_ms_ = &now_ms_;
    if (counted) {
      d.pod->signals().addInFlightTokens(tokens);
      t.in_flight_ = InFlightGuard(d.pod, tokens, InFlightGuard::kCounted);
    } else {
      t.in_flight_ = InFlightGuard(d.pod, tokens);
    }
    t.prefill_ = PrefillGuard(d.pod, to_prefill);
  }
  d.match_percent = pick.match_percent;
  d.details = std::move(input.details);
  d.candidates = std::move(candidates);
  d.candidates.insert(d.candidates.end(), filtered.excluded.begin(), filtered.excluded.end());  // shown by /debug/route
  return d;
}

const ServingPods* Router::sample(const RoutePlan& plan, const RouteQuery& query,
                                  const std::shared_ptr<const discovery::PodSet>& snapshot,
                                  const CandidateFilter& filter, std::mt19937_64& rng, FilteredCandidates& out,
                                  std::shared_ptr<PromptMatch>& prompt) {
  const config::RoutingConfig& routing = config_.routing;
  // The Responses API's chain affinity names a pod that must be a candidate: every pod is.
  if (routing.max_scored_pods == 0 || !plan.strategy->scoresSample() || !query.preferred_pod.empty()) return nullptr;
  thread_local ServingPodsCache cache;
  const std::string& model = query.request.model;
  const ServingPods* pods = cache.get(snapshot, model, filter.leg, filter.disaggregated);
  if (!pods || pods->pods.size() <= routing.max_scored_pods) return nullptr;  // below it: exactly as every pod
  thread_local std::vector<HeldPrefix> held;  // the pods of `pods` holding a prefix of the prompt
  held.clear();
  const bool match = prefix_ && plan.strategy->wantsPromptMatch();
  if (match) {
    if (!prompt) {
      prompt = newPromptMatch();
      prefix_->hashPrompt(query.request, prompt->prompt, pods->skeleton);
    }
    // Standard mode: the holders straight from the index, found from the prompt's first block (a cost that follows
    // the holders, not the fleet); when that block is widely held, or in KV event mode (as the engines' events
    // say), a match over every pod's cached id. Either way the candidates' matches are then computed below exactly
    // as for a decision that scores every pod.
    thread_local std::vector<std::pair<PodId, uint32_t>> holders;
    if (!prefix_->kvEvents() && prefix_->index().holders(model, prompt->prompt.hashes, holders)) {
      for (const auto& [id, blocks] : holders)
        if (auto it = pods->by_id.find(id.value); it != pods->by_id.end()) held.push_back({it->second, blocks});
    } else {
      thread_local std::vector<uint32_t> matched;  // per pod of `pods`
      matched.assign(pods->pods.size(), 0);
      if (!prefix_->kvEvents()) prefix_->index().match(model, prompt->prompt.hashes, pods->ids, matched);
      else prefix_->match(model, prompt->prompt, pods->skeleton, prompt->pods, matched);
      for (uint32_t i = 0; i < matched.size(); ++i)
        if (matched[i] > 0) held.push_back({i, matched[i]});
    }
  }
  const bool panic = cache.panicking(model, filter.panic_threshold_percent, filter.now_ms);
  if (!sampleCandidates(*pods, held, filter, panic, routing.max_scored_pods, routing.sampled_pods, rng, out))
    return nullptr;  // most pods unusable: every pod is filtered (and the prompt, hashed, matched again)
  if (match) {
    prompt->matched.assign(out.candidates.size(), 0);
    prefix_->match(model, prompt->prompt, out.candidates, prompt->pods, prompt->matched,
                   slotWaits(query, *prompt));
  }
  return pods;
}

std::chrono::milliseconds Router::slotWait() const {
  return prefix_ ? prefix_->slotWait() : std::chrono::milliseconds{0};
}

std::vector<double>* Router::slotWaits(const RouteQuery& query, PromptMatch& prompt) const {
  prompt.slot_wait_s.clear();
  return query.may_wait_for_slot && prefix_->slotWait().count() > 0 ? &prompt.slot_wait_s : nullptr;
}

void Router::recordPrompt(const RouteQuery& query, Decision& d, const Candidate& pick, size_t chosen,
                          double started_s) {
  const PromptMatch& m = *d.prompt;
  Ticket::Facts& facts = d.ticket.facts_;
  const std::string& model = query.request.model;
  if (m.prompt.usable) {
    facts.prompt_tokens = static_cast<int64_t>(m.prompt.engine_tokens);
    facts.encoded_prompt_bytes = static_cast<int64_t>(m.prompt.bytes);
    // What the chosen pod is predicted to hold, for the prediction audit (computed against the engine's answer).
    facts.predicted_cached_fraction = m.prompt.fraction(m.matched[chosen]);
    facts.held_blocks = m.matched[chosen];
  }
  if (query.dry_run) return;
  Ticket& t = d.ticket;
  t.prefix_ = prefix_;
  t.prompt_ = d.prompt;
  // A slot engine: what its slots hold of the prompt before this request takes one (the host-cache evidence).
  if (m.prompt.usable)
    if (auto held = prefix_->slotHeldBlocks(model, m.prompt.hashes, *pick.pod))
      facts.slot_held_fraction = m.prompt.fraction(*held);
  // Recorded before proxying, so the next request with the same prefix already follows this one. When its match
  // counted on a busy slot (slot waits), it is queued there and the session waits for its turn.
  std::shared_ptr<SlotTurn> turn;
  if (chosen < m.slot_wait_s.size() && m.slot_wait_s[chosen] > 0) turn = std::make_shared<SlotTurn>();
  // How long it will hold its slot once served: what the next request of its prefix would wait for.
  const double expected_s =
      prefix_->trackedSlots(*pick.pod) == 0 || !m.prompt.usable
          ? -1
          : prefix_->expectedServiceSeconds(*pick.pod, model,
                                            static_cast<double>(m.prompt.engine_tokens) * (1 - m.fraction(chosen)));
  bool queued = false;
  if (!m.prompt.hashes.empty() &&
      !prefix_->recordRouted(model, m.prompt.hashes, *pick.pod, true, &t.held_until_end_, turn, &queued, expected_s))
    prefix_metrics_->error(model, "record_failed");
  if (queued) t.slot_turn_ = std::move(turn);
  // KV event mode: the blocks count for the pod until its engine begins the request (and publishes them).
  t.pending_ = prefix_->holdPending(model, m.prompt.hashes, pick.pod_id);
  const double now_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  prefix_metrics_->decision(model, pick.match_percent, d.outcome, now_s - started_s);
}

void Router::recordTransferred(const RouteQuery& query, Decision& d, const Candidate& pick,
                               std::shared_ptr<PromptMatch> prompt) {
  const PromptBlocks& blocks = prompt->prompt;
  if (!blocks.usable || blocks.hashes.empty()) return;
  const std::string& model = query.request.model;
  // What the decode pod held of the prompt before: its engine pulls only the rest; a failed attempt keeps it.
  thread_local std::vector<PodId> ids;
  uint32_t held = 0;
  prefix_->match(model, blocks, std::span<const Candidate>(&pick, 1), ids, std::span<uint32_t>(&held, 1));
  Ticket::Facts& facts = d.ticket.facts_;
  facts.prompt_tokens = static_cast<int64_t>(blocks.engine_tokens);
  facts.encoded_prompt_bytes = static_cast<int64_t>(blocks.bytes);
  facts.held_blocks = held;
  d.prompt = prompt;
  if (query.dry_run) return;
  Ticket& t = d.ticket;
  t.prefix_ = prefix_;
  t.prompt_ = d.prompt;
  if (!prefix_->recordRouted(model, blocks.hashes, *pick.pod, true)) prefix_metrics_->error(model, "record_failed");
  t.pending_ = prefix_->holdPending(model, blocks.hashes, pick.pod_id);
}

}  // namespace prefixgate::routing
