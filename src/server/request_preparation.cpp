#include "server/request_preparation.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <cmath>

#include "auth/credentials.h"
#include "metrics/api_key_metrics.h"
#include "metrics/gateway_metrics.h"
#include "proxy/upstream_attempt.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/response_affinity.h"
#include "server/client_auth.h"
#include "tokenize/remote_tokenizer.h"
#include "trace/tracer.h"
#include "util/recycling_allocator.h"
#include "util/thread_spares.h"

namespace prefixgate::server {
namespace {
using RemoteTokens = openai::RequestView::RemoteTokens;

// The route span's attributes (docs/configuration.md, "Tracing"): what routing::Decision says of the choice.
void describeRoute(const routing::Decision& d, trace::Span& span) {
  if (d.failure != routing::RouteFailure::kNone) {
    span.set("error.type", openai::errorInfo(routing::errorFor(d.failure)).label);
    span.fail(d.message);
    return;
  }
  span.set("prefixgate.strategy", d.strategy);
  if (d.pod) span.set("prefixgate.pod", d.pod->name());
  if (!d.outcome.empty()) span.set("prefixgate.selection", d.outcome);
  span.set("prefixgate.candidates", static_cast<int64_t>(d.candidates.size()));
  if (d.match_percent >= 0) span.set("prefixgate.prefix_match_percent", d.match_percent);
  const routing::Ticket::Facts& facts = d.ticket.facts();
  if (facts.prompt_tokens >= 0) span.set("prefixgate.prompt_tokens", facts.prompt_tokens);
  if (d.prompt) {
    span.set("prefixgate.prompt_blocks", static_cast<int64_t>(d.prompt->prompt.hashes.size()));
    span.set("prefixgate.matched_blocks", static_cast<int64_t>(facts.held_blocks));
  }
  if (!std::isnan(facts.predicted_cached_fraction) && facts.prompt_tokens >= 0)
    span.set("prefixgate.predicted_cached_tokens",
             static_cast<int64_t>(std::llround(facts.predicted_cached_fraction * static_cast<double>(facts.prompt_tokens))));
}
}  // namespace

PreparedRequest::~PreparedRequest() { util::StringPool::give(std::move(request.prompt_text)); }

std::string_view tokensSource(const openai::RequestView& request) {
  switch (request.remote_tokens) {
    case RemoteTokens::kOk: return "remote";
    case RemoteTokens::kFailed: return "remote_failed";
    case RemoteTokens::kNone: return "local";
  }
  return "local";
}

RequestPreparation::RequestPreparation(const Deps& deps) : deps_(deps) {}

ClientAuth RequestPreparation::clientAuth() const { return ClientAuth(deps_.credentials, deps_.api_key_metrics); }

// The coroutine keeps only what lives across its waits (flow control's queue, the remote tokenizer); the steps
// between them are plain functions, so their temporaries (decisions, spans, errors) stay off its frame, which
// then fits what asio recycles per thread (1,020 bytes).
boost::asio::awaitable<void> RequestPreparation::prepare(RequestToPrepare in, PreparedRequest& out) {
  out.headers = in.headers;
  out.dry_run = in.dry_run;
  if (!parseAndAdmit(in, out)) co_return;
  if (!in.dry_run && deps_.flow) {
    if (std::optional<FlowRefusal> held = co_await deps_.flow->admit(flowAdmission(in, out.request), out.flow)) {
      out.refusal = PrepareRefusal{held->error, std::move(held->message), std::move(held->param)};
      co_return;
    }
  }
  RouteStep step = planRoute(out);
  // Tracing: the tokenize span covers the plan and the remote tokenizer (a local tokenizer runs inside the choice:
  // the route span's time).
  util::RecycledPtr<trace::Span> tokenize_span;
  if (in.trace) tokenize_span = util::makeRecycled<trace::Span>(in.trace->startChild("tokenize", trace::SpanKind::kInternal));
  if (asksRemoteTokens(step.plan, out.request))
    out.tokens = co_await fetchRemoteTokens(step.query, out.request, in.connections);
  if (tokenize_span) endTokenizeSpan(*in.trace, std::move(*tokenize_span), out);
  route(in, out, step);
  if (!out.refusal && out.decision.ticket.slotTurn()) co_await waitForSlot(in, out);
}

boost::asio::awaitable<void> RequestPreparation::waitForSlot(const RequestToPrepare& in, PreparedRequest& out) {
  namespace asio = boost::asio;
  routing::Ticket& ticket = out.decision.ticket;
  const auto started = std::chrono::steady_clock::now();
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  // The turn comes on the thread whose request freed the slot: it cancels the timer through this one's executor.
  auto timer = std::make_shared<asio::steady_timer>(executor, deps_.router.slotWait());
  bool turn = ticket.slotTurn()->whenReady([timer, executor] { asio::post(executor, [timer] { timer->cancel(); }); });
  bool gone = false;
  if (!turn) {
    // The client is watched while it waits, as in flow control's queue: a hang-up cancels the timer (same thread).
    auto watch = std::make_shared<proxy::ClientWatch>();
    watch->pipelined = in.pipelined;
    watch->waiter = timer.get();
    if (in.client) proxy::watchClient(*in.client, watch);
    boost::system::error_code ec;
    co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    gone = watch->gone;
    turn = ec == asio::error::operation_aborted && !gone;
    // The relay watches the client again from its own start: this watch's read must not outlive the wait.
    watch->done = true;
    watch->waiter = nullptr;
    if (in.client) {
      boost::system::error_code ignored;
      in.client->socket().cancel(ignored);
    }
  }
  ticket.endSlotWait();
  out.slot_wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  deps_.metrics.slotWaited(gone ? "client_gone" : turn ? "turn" : "timeout", out.slot_wait_seconds);
  if (gone) {
    // Never sent: what the decision recorded for the pod goes, and its slot frees for the next one waiting.
    ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
    out.refusal = PrepareRefusal{openai::GatewayError::kClientGone, "the client left while its request waited for a slot", {}};
  }
}

bool RequestPreparation::parseAndAdmit(const RequestToPrepare& in, PreparedRequest& out) {
  const config::Config& config = deps_.config;
  if (auto error = openai::parseRequest(in.endpoint, in.body, config.routing.prefix_cache.include_tools,
                                        config.limits.max_json_depth, out.request)) {
    out.refusal = PrepareRefusal{openai::GatewayError::kInvalidRequest, std::move(error.message),
                                 std::move(error.param)};
    return false;
  }
  if (!in.dry_run) {
    out.refusal = admit(in, out.request);
    if (out.refusal) return false;
  }
  out.request.session_id = in.headers.session_id;
  followPreviousResponse(out);
  return true;
}

RequestPreparation::RouteStep RequestPreparation::planRoute(PreparedRequest& out) const {
  // Rerank and score generate nothing, and the connector protocol (kv_transfer_params) is the OpenAI endpoints':
  // those and Anthropic's are never split into prefill and decode legs.
  // The Responses API keeps its state on the pod that produced it: never split either.
  const bool disaggregated = openai::matchesPrompt(out.request.endpoint) && !openai::isAnthropic(out.request.endpoint) &&
                             out.request.endpoint != openai::Endpoint::kResponses &&
                             deps_.router.disaggregated(out.request.model);
  if (disaggregated) out.leg = PodRole::kPrefill;
  // A heavy tenant's request goes only to its own pods (flow_control.confine_heavy_tenants; none else excluded).
  routing::RouteQuery query = out.query(out.flow.routeExclude());
  // The strategy, resolved once: the tokenizer step prepares for it, the choice applies it.
  routing::RoutePlan plan = deps_.router.plan(query);
  // A whole request's first decision may wait for a slot engine's busy slot (a failover's may not).
  query.may_wait_for_slot = !disaggregated && !out.dry_run;
  return RouteStep{disaggregated, query, std::move(plan)};
}

void RequestPreparation::endTokenizeSpan(trace::RequestTrace& trace, trace::Span span, const PreparedRequest& out) {
  if (trace.recording()) {
    span.set("prefixgate.tokens_source", tokensSource(out.request));
    if (!out.tokens.outcome.empty()) span.set("prefixgate.remote_tokenizer.outcome", out.tokens.outcome);
    if (out.request.remote_token_ids)
      span.set("prefixgate.prompt_tokens", static_cast<int64_t>(out.request.remote_token_ids->size()));
    if (out.request.remote_tokens == RemoteTokens::kFailed) span.fail("the remote tokenizer gave no tokens");
  }
  trace.end(std::move(span));
}

void RequestPreparation::route(RequestToPrepare& in, PreparedRequest& out, RouteStep& step) {
  routing::RoutePlan& plan = step.plan;
  routing::RouteQuery& query = step.query;
  std::optional<trace::Span> route_span;
  if (in.trace) route_span.emplace(in.trace->startChild("route", trace::SpanKind::kInternal));
  if (step.disaggregated) {
    if (servedWhole(plan, query, in.rng)) {
      out.pd_outcome = "aggregated";
    } else if (const uint32_t busy = deps_.config.disaggregation.max_prefill_in_flight;
               busy > 0 && deps_.router.prefillPoolBusy(out.request.model, busy)) {
      out.pd_outcome = "prefill_busy";  // the decode side prefills it rather than queue behind the prefill pods
    }
    if (!out.pd_outcome.empty()) out.leg = plan.leg = query.leg = PodRole::kBoth;
  }
  out.decision = deps_.router.choose(plan, query, in.rng);
  if (out.decision.failure != routing::RouteFailure::kNone && !query.exclude.empty()) {
    query.exclude = {};  // none of its own pods could take it: any pod may
    out.decision = deps_.router.choose(plan, query, in.rng);
  }
  if (route_span) {
    if (in.trace->recording()) describeRoute(out.decision, *route_span);
    in.trace->end(std::move(*route_span));
  }
  if (out.decision.failure != routing::RouteFailure::kNone) {
    out.refusal = PrepareRefusal{routing::errorFor(out.decision.failure), out.decision.message, {}};
    return;
  }
  out.flow.routed();  // its pod counts it in flight now
  countPreviousResponse(out);
  if (out.leg != PodRole::kPrefill) return;
  std::optional<trace::Span> decode_span;
  if (in.trace) decode_span.emplace(in.trace->startChild("route decode", trace::SpanKind::kInternal));
  out.decode.emplace(deps_.router.chooseDecode(query, out.decision, in.rng));
  if (decode_span) {
    if (in.trace->recording()) describeRoute(*out.decode, *decode_span);
    in.trace->end(std::move(*decode_span));
  }
  if (out.decode->failure != routing::RouteFailure::kNone) {
    // The prefill pod will not be sent the prompt: what its decision recorded goes.
    if (!in.dry_run) out.decision.ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
    out.refusal = PrepareRefusal{routing::errorFor(out.decode->failure), out.decode->message, {}};
  }
}

FlowAdmission RequestPreparation::flowAdmission(const RequestToPrepare& in, const openai::RequestView& request) const {
  const auth::ApiKey* key = in.auth ? in.auth->key() : nullptr;
  flow::FlowRequest flow;
  if (key) {
    flow.api_key_name = key->name;
    flow.key_priority_class = key->priority_class;
    flow.key_ttft_slo_ms = key->ttft_slo_ms;
  }
  flow.tenant_header = in.headers.tenant;
  flow.body_user = request.user;
  flow.priority_header = in.headers.priority;
  flow.slo_ttft_header = in.headers.slo_ttft_ms;
  if (auto model = deps_.config.models.find(request.model); model != deps_.config.models.end())
    flow.model_ttft_slo_ms = model->second.ttft_slo_ms;
  const int64_t tokens = routing::estimatedPromptTokens(request);
  return FlowAdmission{request.model, flow, static_cast<uint64_t>(std::max<int64_t>(tokens, 0)), in.body.size(),
                       in.client, in.pipelined};
}

bool RequestPreparation::servedWhole(const routing::RoutePlan& plan, const routing::RouteQuery& query,
                                     std::mt19937_64& rng) {
  const uint32_t threshold = deps_.config.disaggregation.aggregate_below_tokens;
  if (threshold == 0) return false;
  const int64_t tokens = routing::estimatedPromptTokens(query.request);
  if (tokens < threshold) return true;
  // Where a whole request would go, and what that pod holds of the prompt: a dry run (records and counts nothing).
  routing::RoutePlan whole = plan;
  whole.leg = PodRole::kBoth;
  routing::RouteQuery probe = query;
  probe.dry_run = true;
  probe.leg = PodRole::kBoth;
  const routing::Decision d = deps_.router.choose(whole, probe, rng);
  if (d.failure != routing::RouteFailure::kNone || d.match_percent < 0) return false;
  return static_cast<double>(tokens) * (100 - d.match_percent) / 100.0 < threshold;
}

// The API key's models and limits (which count the request against the key's allowance), then the gateway's
// in-flight bound.
std::optional<PrepareRefusal> RequestPreparation::admit(const RequestToPrepare& in,
                                                        const openai::RequestView& request) const {
  if (in.auth) {
    if (std::optional<auth::Refusal> refusal = in.auth->authorize(request.model))
      return PrepareRefusal{refusal->error, std::move(refusal->message), std::move(refusal->param),
                            refusal->retry_after_s};
  }
  const uint32_t max_in_flight = deps_.config.limits.max_in_flight;
  if (max_in_flight > 0 && deps_.active_requests.load() > static_cast<int64_t>(max_in_flight))
    return PrepareRefusal{openai::GatewayError::kOverloaded,
                          "the gateway has limits.max_in_flight requests in flight; retry later", {}};
  return std::nullopt;
}

void RequestPreparation::followPreviousResponse(PreparedRequest& out) const {
  const std::string& id = out.request.previous_response_id;
  if (id.empty() || !deps_.response_affinity) return;
  if (std::optional<std::string> pod = deps_.response_affinity->podOf(id)) {
    out.preferred_pod = std::move(*pod);
  } else if (!out.dry_run) {
    deps_.response_affinity->count(routing::ResponseAffinity::Outcome::kUnknown);
  }
}

void RequestPreparation::countPreviousResponse(const PreparedRequest& out) const {
  using Outcome = routing::ResponseAffinity::Outcome;
  if (out.preferred_pod.empty() || out.dry_run || !deps_.response_affinity) return;
  const bool hit = out.decision.pod && out.decision.pod->name() == out.preferred_pod;
  deps_.response_affinity->count(hit ? Outcome::kHit : Outcome::kPodGone);
}

routing::Decision RequestPreparation::chooseAgain(const PreparedRequest& prepared, routing::Decision& failed,
                                                  std::span<const PodId> exclude, std::mt19937_64& rng) {
  return deps_.router.chooseAgain(failed, prepared.query(exclude), rng);
}

bool RequestPreparation::asksRemoteTokens(const routing::RoutePlan& plan, openai::RequestView& request) const {
  request.remote_tokens = RemoteTokens::kNone;
  request.remote_token_ids.reset();
  // Token ids in the prompt are already the engine's: nothing to ask.
  if (!deps_.tokenizer || request.has_token_ids) return false;
  // The engines' /tokenize takes OpenAI chat messages: Anthropic's blocks are not asked (with the remote tokenizer
  // on, such requests are routed by load alone, as the prefix strategies never hash local text then).
  // Nor are the Responses API's items (the engine's /tokenize takes no Responses input either).
  if (openai::isAnthropic(request.endpoint) || request.endpoint == openai::Endpoint::kResponses) return false;
  if (!plan.wantsPromptTokens()) return false;
  // A model no pod serves is refused by the router (404): asking a tokenizer is wasted, and counting the failure by
  // the client's model name (aibrix_prefix_cache_routing_errors_total) would add series for every made-up name.
  return deps_.pods.snapshot()->podsFor(request.model) != nullptr;
}

// Success puts the engine's ids in the request; failure marks it, and the strategy then scores it by load alone
// (never by hashes of another token domain).
boost::asio::awaitable<RemoteTokensReport> RequestPreparation::fetchRemoteTokens(
    const routing::RouteQuery& query, openai::RequestView& request, tokenize::ConnectionPool* connections) {
  RemoteTokensReport report;
  const tokenize::TokenizeInput input{request.model, request.endpoint == openai::Endpoint::kChatCompletions,
                                      request.raw_messages, request.raw_tools, request.raw_prompt};
  tokenize::TokenizeResult result = co_await deps_.tokenizer->tokenize(input, connections);
  report.outcome = tokenize::outcomeLabel(result.outcome);
  if (result.engine != engine::EngineKind::kAuto) report.engine = engine::engineKindName(result.engine);
  report.engine_assumed = result.engine_assumed;
  if (result.ok()) {
    request.remote_tokens = RemoteTokens::kOk;
    request.remote_token_ids = std::move(result.tokens);
  } else {
    request.remote_tokens = RemoteTokens::kFailed;
  }
  if (query.dry_run) co_return report;
  deps_.metrics.remoteTokenizer(report.outcome, result.seconds);
  if (!request.remote_token_ids) {
    deps_.prefix_metrics.error(request.model, "tokenize_failed");
    warnThrottled(request, result);
  }
  co_return report;
}

void RequestPreparation::warnThrottled(const openai::RequestView& request, const tokenize::TokenizeResult& result) {
  uint64_t suppressed = 0;
  if (!tokenize_warnings_.allow(suppressed)) return;
  log::warn("remote tokenizer: {} for model {} ({}); routing by load alone ({} more since the last such line)",
            tokenize::outcomeLabel(result.outcome), request.model, result.error, suppressed);
}

}  // namespace prefixgate::server
