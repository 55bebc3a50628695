#include "routing/router.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "openai/errors.h"
#include "routing/load_score.h"
#include "routing/prefix/prefix_services.h"

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

namespace {

// A candidate as the decision starts: the in-flight count (every replica's, with state sync), this gateway's
// in-flight tokens and, when recent enough, the engine's load.
Candidate candidateFor(const discovery::PodState& pod, int64_t now_ms, int64_t max_engine_age_ms) {
  Candidate c;
  c.pod = &pod;
  c.pod_id = pod.id();
  c.in_flight = pod.inFlightAllReplicas();
  c.in_flight_tokens = static_cast<double>(std::max<int64_t>(0, pod.inFlightTokens()));
  c.prefill_requests = std::max(0, pod.prefillRequests());
  c.prefill_tokens = static_cast<double>(std::max<int64_t>(0, pod.prefillTokens()));
  const engine::EngineLoadView view = pod.engine().view();
  if (view.fresh(now_ms, max_engine_age_ms)) {
    c.waiting = std::isnan(view.waiting) ? 0 : view.waiting;
    c.kv_usage = view.kv_usage;
  }
  c.capacity = view.capacity;
  return c;
}

// With state sync, the other replicas' requests in flight to each candidate count at the mean prompt tokens of
// this gateway's own requests in flight (only their counts cross Redis).
void addOtherReplicasTokens(std::span<const discovery::PodPtr> serving, std::vector<Candidate>& candidates) {
  int64_t tokens = 0, requests = 0;
  for (const discovery::PodPtr& pod : serving) {
    tokens += std::max<int64_t>(0, pod->inFlightTokens());
    requests += std::max(0, pod->inFlight());
  }
  if (requests == 0) return;
  const double per_request = static_cast<double>(tokens) / static_cast<double>(requests);
  for (Candidate& c : candidates) c.in_flight_tokens += std::max(0, c.in_flight - c.pod->inFlight()) * per_request;
}

}  // namespace

FilteredCandidates filterCandidates(std::span<const discovery::PodPtr> serving, const CandidateFilter& filter) {
  FilteredCandidates out;
  const bool panic = panicking(serving, filter.panic_threshold_percent, filter.now_ms);
  bool other_replicas = false;
  out.candidates.reserve(serving.size());
  for (const discovery::PodPtr& pod : serving) {
    if (!(panic ? pod->healthy() && !pod->removed() : pod->ready(filter.now_ms))) continue;
    if (std::find(filter.exclude.begin(), filter.exclude.end(), pod->id()) != filter.exclude.end()) continue;
    // The per-pod queue bound (limits.max_in_flight_per_pod): a full pod takes no more.
    if (filter.max_in_flight_per_pod > 0 && pod->inFlightAllReplicas() >= filter.max_in_flight_per_pod) {
      ++out.full;
      continue;
    }
    out.candidates.push_back(candidateFor(*pod, filter.now_ms, filter.max_engine_age_ms));
    other_replicas |= out.candidates.back().in_flight > pod->inFlight();
  }
  if (out.candidates.empty()) return out;
  if (other_replicas) addOtherReplicasTokens(serving, out.candidates);
  // A pod whose KV cache is nearly full (infinite capacity-aware score) is not a candidate unless every pod is.
  // The scores stay on the candidates: load-aware strategies use them as computed with this request's settings.
  capacityLoadScores(out.candidates, filter.load_balance);
  excludeInfiniteLoad(out.candidates, out.excluded);
  // Before any strategy: when load is severely skewed, only the least-loaded pods stay candidates.
  applyImbalanceGate(out.candidates, filter.load_imbalance);
  return out;
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

bool panicking(std::span<const discovery::PodPtr> serving, uint32_t threshold_percent, int64_t now_ms) {
  uint64_t live = 0;
  uint64_t ready = 0;
  for (const discovery::PodPtr& pod : serving) {
    if (pod->removed()) continue;
    ++live;
    if (pod->ready(now_ms)) ++ready;
  }
  return ready * 100 < uint64_t{threshold_percent} * live;
}

int64_t steadyNowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

Router::Router(const StrategyRegistry& registry, const StrategyDeps& deps, const discovery::PodRegistry& pods,
               NowMs now_ms)
    : config_(deps.config), prefix_(deps.prefix), pods_(pods), now_ms_(std::move(now_ms)), strategies_(registry.createAll(deps)) {}

std::vector<std::string> Router::strategyNames() const {
  std::vector<std::string> out;
  for (const auto& [name, s] : strategies_) out.push_back(name);
  return out;
}

Strategy* Router::resolve(const RouteQuery& query, RequestSettings& settings, std::string& message) const {
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

  auto it = strategies_.find(name);
  if (it != strategies_.end()) return it->second.get();
  message = "unknown routing strategy '" + openai::printable(name, 64) + "' (valid: ";
  bool first = true;
  for (const auto& [n, s] : strategies_) {
    message += (first ? "" : ", ") + n;
    first = false;
  }
  message += ")";
  return nullptr;
}

StrategyChoice Router::resolveStrategy(const RouteQuery& query) const {
  RequestSettings settings;
  std::string message;
  const Strategy* strategy = resolve(query, settings, message);
  if (!strategy) return {};
  return {strategy->name(), strategy->wantsPromptTokens()};
}

Decision Router::choose(const RouteQuery& query, std::mt19937_64& rng) {
  Decision d;
  RequestSettings settings;
  Strategy* strategy = resolve(query, settings, d.message);
  if (!strategy) {
    d.failure = RouteFailure::kUnknownStrategy;
    return d;
  }
  d.strategy = strategy->name();

  auto snapshot = pods_.snapshot();
  const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(query.request.model);
  if (!serving) {
    d.failure = RouteFailure::kModelNotServed;
    // The name is the client's: cut, so an error never echoes megabytes back.
    d.message = "the model '" + openai::printable(query.request.model, 256) + "' does not exist or no pod serves it";
    return d;
  }
  CandidateFilter filter;
  filter.now_ms = now_ms_();
  filter.max_engine_age_ms = engine::maxEngineMetricsAgeMs(config_.engine_metrics.scrape_interval_ms,
                                                           config_.engine_metrics.scrape_timeout_ms);
  filter.max_in_flight_per_pod = static_cast<int32_t>(config_.limits.max_in_flight_per_pod);
  filter.panic_threshold_percent = config_.health_check.panic_threshold_percent;
  filter.exclude = query.exclude;
  filter.load_balance = settings.load_balance;
  filter.load_imbalance = config_.routing.load_imbalance;
  FilteredCandidates filtered = filterCandidates(*serving, filter);
  std::vector<Candidate>& candidates = filtered.candidates;
  if (candidates.empty() && filtered.full > 0) {
    d.failure = RouteFailure::kAllOverloaded;
    d.message = "every pod serving the model '" + query.request.model +
                "' has limits.max_in_flight_per_pod requests in flight; retry later";
    return d;
  }
  if (candidates.empty()) {
    d.failure = RouteFailure::kNoReadyPod;
    d.message = "no ready pod serves the model '" + query.request.model + "'";
    return d;
  }
  RoutingInput input{query.request, candidates, settings, rng, query.dry_run, {}, {}, NAN, nullptr};
  strategy->score(input);

  const size_t best = pickBest(candidates, rng);
  strategy->onPicked(input, best);

  discovery::PodPtr chosen;
  for (const discovery::PodPtr& pod : *serving)
    if (pod.get() == candidates[best].pod) chosen = pod;
  // Counted at the moment of choice, so the next decision (on any thread) already sees it.
  const int64_t tokens =
      input.prompt_tokens >= 0
          ? input.prompt_tokens
          : estimatedPromptTokens(query.request, prefix_ ? prefix_->bytesPerToken().ratio(query.request.model)
                                                         : tokenize::kDefaultBytesPerToken);
  const int64_t to_prefill = input.uncached_tokens >= 0 ? std::min(input.uncached_tokens, tokens) : tokens;
  // What the pod had to do when the request was sent, for learning its rates from the response's first byte.
  const Candidate& pick = candidates[best];
  d.sent = {pick.prefill_tokens + queuedElsewhere(pick, tokens), static_cast<double>(to_prefill),
            static_cast<double>(std::max(0, pick.in_flight - pick.prefill_requests))};
  if (!query.dry_run) {
    d.guard = discovery::InFlightGuard(chosen, tokens);
    d.prefill = discovery::PrefillGuard(chosen, to_prefill);
  }
  d.pod = std::move(chosen);
  d.match_percent = candidates[best].match_percent;
  d.predicted_cached_fraction = input.predicted_cached_fraction;
  d.encoded_prompt_bytes = input.encoded_prompt_bytes;
  d.prompt_tokens = tokens;
  d.slot_held_fraction = input.slot_held_fraction;
  d.pending = std::move(input.pending);
  d.held_until_end = std::move(input.held_until_end);
  d.outcome = input.outcome;
  d.details = std::move(input.details);
  d.candidates = std::move(candidates);
  d.candidates.insert(d.candidates.end(), filtered.excluded.begin(), filtered.excluded.end());  // shown by /debug/route
  return d;
}

}  // namespace prefixgate::routing
