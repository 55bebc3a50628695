// The admin listener: /metrics, /healthz, /readyz, /debug/pods, /debug/route, /debug/queues; and the health listener (/healthz
// and /readyz only). Both run on the control thread, one coroutine per connection: every read has a deadline
// (a stalled client loses its connection, never the thread) and a body is bounded by limits.admin_max_body_bytes.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "auth/api_keys.h"
#include "auth/credentials.h"
#include "config/config.h"
#include "discovery/pod_set.h"
#include "engine/engine_metrics.h"
#include "metrics/gateway_metrics.h"
#include "openai/errors.h"
#include "openai/request.h"
#include "openai/responses_request.h"
#include "routing/prefix/prefix_services.h"
#include "server/control_plane.h"
#include "server/request_preparation.h"
#include "server/responses.h"
#include "sync/state_sync.h"
#include "tokenize/remote_tokenizer.h"

namespace prefixgate::server {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;
using nlohmann::json;

namespace {

constexpr size_t kFirstReadBytes = 1024;

struct AdminResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HeaderList headers;
};

AdminResponse errorResponse(openai::GatewayError error, std::string_view message, std::string_view param = {}) {
  return {openai::errorInfo(error).status, "application/json", openai::errorBody(error, message, param), {}};
}

// A number, or null when the engine did not report it.
json known(bool has, double value) { return has ? json(value) : json(nullptr); }

// A slot engine's (llama.cpp's) cache beyond its slots as learned so far; null for other pods.
json slotCacheName(const discovery::PodState& pod) {
  if (pod.engineKind() != engine::EngineKind::kLlamaCpp || pod.engine().slots() == 0) return nullptr;
  switch (pod.engine().slotCache()) {
    case engine::EngineLoad::SlotCache::kSlotsOnly: return "slots_only";
    case engine::EngineLoad::SlotCache::kHostCache: return "host_cache";
    case engine::EngineLoad::SlotCache::kUnknown: break;
  }
  return "unknown";
}

// What the scraper last read from the pod's engine /metrics (in the pod's dialect), and the gateway's measured
// output rate. stale: the last scrape failed, or none succeeded within the staleness limit (routing then treats the
// pod as neutral). A signal the dialect cannot report is listed in `unreported`; failed scrapes are counted by
// reason (a page without the dialect's series is one: the pod's load is then unknown, never idle).
json engineJson(const discovery::PodState& pod, int64_t now, int64_t max_age_ms) {
  const engine::EngineSnapshot s = pod.engine().latest();
  const bool scraped = s.valid;
  const engine::EngineKind kind = pod.engineKind();
  json errors = json::object();
  for (size_t i = 0; i < static_cast<size_t>(engine::ScrapeError::kCount); ++i) {
    const auto reason = static_cast<engine::ScrapeError>(i);
    errors[std::string(engine::scrapeErrorLabel(reason))] = pod.engine().scrapeErrors(reason);
  }
  const std::string capacity_error = pod.engine().capacityError();
  return {{"unreported", engine::unreportedSignals(kind)},
          {"known_series", s.known_series},
          {"running", known(s.has_running, s.running)},
          {"waiting", known(s.has_waiting, s.waiting)},
          {"kv_cache_usage", known(s.has_kv_usage, s.kv_usage)},
          {"prefix_cache_hits", known(s.has_prefix_cache, s.prefix_cache_hits)},
          {"prefix_cache_queries", known(s.has_prefix_cache, s.prefix_cache_queries)},
          {"block_size", known(s.has_cache_config, s.block_size)},
          {"num_gpu_blocks", known(s.has_cache_config, s.num_gpu_blocks)},
          {"slots", pod.engine().slots() ? json(pod.engine().slots()) : json(nullptr)},
          {"slot_cache", slotCacheName(pod)},
          {"capacity_error", capacity_error.empty() ? json(nullptr) : json(capacity_error)},
          {"scraped_ms_ago", scraped ? json(now - s.scraped_at_ms) : json(nullptr)},
          {"stale", !scraped || s.stale || now - s.scraped_at_ms > max_age_ms},
          {"failed_scrapes", s.failed_scrapes},
          {"scrape_errors", errors},
          {"last_error", s.last_error},
          {"capacity_tokens_per_s", pod.engine().capacityTokensPerSecond(now)}};
}

// Why the pod's latest scrape failed (null when it succeeded, or none was tried yet).
json scrapeErrorJson(const discovery::PodState& pod) {
  const engine::EngineSnapshot s = pod.engine().latest();
  return s.stale && !s.last_error.empty() ? json(s.last_error) : json(nullptr);
}

// The prediction audit's sums for the pod (routing/prediction_audit.h); accuracy null until a response was audited.
json predictionJson(const discovery::PodState& pod) {
  const routing::PredictionTotals::Sums s = pod.signals().prediction().sums();
  const std::optional<double> accuracy = s.accuracy();
  return {{"responses", s.responses},
          {"predicted_tokens", s.predicted_tokens},
          {"engine_cached_tokens", s.engine_cached_tokens},
          {"over_predicted_tokens", s.over_predicted_tokens},
          {"under_predicted_tokens", s.under_predicted_tokens},
          {"accuracy", accuracy ? json(*accuracy) : json(nullptr)}};
}

// KV event sync's view of the pod's publisher: whether it is subscribed, how much it said and how long ago, and
// whether routing treats it as silent (routing.prefix_cache.silent_publisher_ms).
json kvSyncJson(const discovery::PodState& pod, int64_t now, int64_t silent_ms) {
  const discovery::KvSyncState& kv = pod.kvSync();
  const int64_t last = kv.lastEventMs();
  return {{"subscribed", kv.subscribed()},
          {"messages", kv.events()},
          {"last_message_age_ms", kv.events() > 0 ? json(now - last) : json(nullptr)},
          {"silent", kv.silent(silent_ms)}};
}

// With state sync: each replica's in-flight count on the pod, this one's included; null when sync is off.
json replicaLoadsJson(const AdminServices& admin, const discovery::PodState& pod) {
  const sync::StateSync* sync = admin.state_sync;
  if (!sync) return nullptr;
  json out = json::object();
  out[sync->replicaId()] = pod.signals().inFlight();
  for (const auto& [replica, n] : sync->replicaLoads(pod.spec().address)) out[replica] = n;
  return out;
}

json stateSyncJson(const AdminServices& admin) {
  const sync::StateSync* sync = admin.state_sync;
  if (!sync) return json{{"enabled", false}};
  const sync::StateSync::Status s = sync->status();
  return {{"enabled", true},
          {"replica_id", s.replica_id},
          {"connected", s.connected},
          {"shares_records", s.shares_records},
          {"other_replicas", s.replicas},
          {"stream_position", s.stream_position}};
}

// The pod's learned service rates (routing::ServiceRates; the defaults until its first sample).
json ratesJson(const discovery::PodState& pod) {
  const routing::ServiceRates::Rates r = pod.signals().rates().read();
  return {{"samples", r.samples},
          {"base_ms", r.base_s * 1000},
          {"prefill_tokens_per_s", 1 / r.prefill_s_per_token},
          {"queue_ms_per_1k_tokens", r.queue_s_per_token * 1e6},
          {"decode_ms_per_request", r.decode_s_per_request * 1000},
          {"prefill_requests", pod.signals().prefillRequests()},
          {"prefill_tokens", pod.signals().prefillTokens()}};
}

// The remote tokenizer's breaker for the pod (tokenize/tokenize_breaker.h); null when the remote tokenizer is off.
json tokenizerBreakerJson(const AdminServices& admin, const discovery::PodState& pod) {
  const tokenize::RemoteTokenizer* tokenizer = admin.remote_tokenizer;
  if (!tokenizer) return nullptr;
  const tokenize::TokenizeBreakers::View view = tokenizer->breaker(pod.id().value);
  using State = tokenize::TokenizeBreakers::State;
  const bool closed = view.state == State::kClosed;
  return {{"state", closed ? "closed" : view.state == State::kOpen ? "open" : "half_open"},
          {"retry_in_ms", view.state == State::kOpen ? json(view.retry_in_ms) : json(nullptr)},
          {"failures", view.failures},
          {"last_failure", closed ? json(nullptr) : json(std::string(tokenize::breakerFailureLabel(view.last)))}};
}

json podsJson(const AdminServices& admin) {
  auto snapshot = admin.pods.snapshot();
  const int64_t now = routing::steadyNowMs();
  const auto& em = admin.config.engine_metrics;
  const int64_t max_age = engine::maxEngineMetricsAgeMs(em.scrape_interval_ms, em.scrape_timeout_ms);
  json pods = json::array();
  for (const auto& pod : snapshot->pods()) {
    pods.push_back({{"name", pod->name()},
                    {"id", pod->id().value},
                    {"address", pod->spec().address},
                    {"models", pod->spec().models},
                    {"role", discovery::roleName(pod->spec().role)},
                    {"ready", pod->ready(now)},
                    {"healthy", pod->healthy()},
                    {"health_checked", pod->checked()},
                    {"ejected_for_ms", std::max<int64_t>(0, pod->ejectedUntilMs() - now)},
                    {"in_flight", pod->signals().inFlight()},
                    {"in_flight_all_replicas", pod->signals().inFlightAllReplicas()},
                    {"in_flight_by_replica", replicaLoadsJson(admin, *pod)},
                    {"kv_events", pod->spec().kv_events},
                    {"kv_replay", pod->spec().kv_replay},
                    {"kv_capacity_tokens", pod->spec().kv_capacity_tokens ? pod->spec().kv_capacity_tokens
                                                                          : pod->engine().kvCapacityTokens()},
                    {"kv_sync", kvSyncJson(*pod, now, admin.config.routing.prefix_cache.silent_publisher_ms)},
                    // The dialect spoken to it, where it came from, and why its metrics cannot be read when they
                    // cannot (its load is then unknown, never idle).
                    {"engine", engine::engineKindName(pod->engineKind())},
                    {"engine_source", pod->spec().engine != engine::EngineKind::kAuto ? "configured"
                                      : pod->engineKind() != engine::EngineKind::kAuto ? "recognised"
                                                                                      : "unknown"},
                    {"scrape_error", scrapeErrorJson(*pod)},
                    {"engine_metrics", engineJson(*pod, now, max_age)},
                    {"prediction", predictionJson(*pod)},
                    {"tokenizer_breaker", tokenizerBreakerJson(admin, *pod)},
                    {"rates", ratesJson(*pod)}});
  }
  // Per model: the bytes of the index's encoding per engine token, learned from the engines' usage (the default
  // until a response reported it): what turns KV capacities into blocks and prompts into prefill tokens.
  json models = json::object();
  for (const std::string& model : snapshot->models()) {
    const routing::BytesPerToken& ratios = admin.bytes_per_token;
    models[model] = {{"bytes_per_engine_token", ratios.ratio(model)}, {"samples", ratios.samples(model)}};
  }
  return json{{"pods", pods}, {"models", models}, {"state_sync", stateSyncJson(admin)}};
}

json decisionJson(const routing::Decision& d);

// A coroutine: with the remote tokenizer on, the dry run asks it as a real request would (fresh connections from
// the control thread; nothing counted), so the decision hashes the same tokens.
asio::awaitable<AdminResponse> debugRoute(ControlPlane& control, http::request<http::string_body>& req) {
  std::string_view target = req.target();
  openai::Endpoint endpoint = openai::Endpoint::kChatCompletions;
  if (target.find("endpoint=completions") != std::string_view::npos) endpoint = openai::Endpoint::kCompletions;
  else if (target.find("endpoint=embeddings") != std::string_view::npos) endpoint = openai::Endpoint::kEmbeddings;
  else if (target.find("endpoint=rerank") != std::string_view::npos) endpoint = openai::Endpoint::kRerank;
  else if (target.find("endpoint=score") != std::string_view::npos) endpoint = openai::Endpoint::kScore;
  else if (target.find("endpoint=messages") != std::string_view::npos) endpoint = openai::Endpoint::kMessages;
  else if (target.find("endpoint=responses") != std::string_view::npos) endpoint = openai::Endpoint::kResponses;
  PreparedRequest prepared;
  co_await control.admin->preparation.prepare(
      {.endpoint = endpoint,
       .body = req.body(),
       .headers = routeHeaders(req, control.admin->config.flow_control.tenant_header),
       .rng = control.rng,
       .dry_run = true},
      prepared);
  if (prepared.refusal)
    co_return errorResponse(prepared.refusal->error, prepared.refusal->message, prepared.refusal->param);
  const routing::Decision& d = prepared.decision;
  const openai::RequestView& request = prepared.request;
  const RemoteTokensReport& tokenized = prepared.tokens;
  json out = decisionJson(d);
  if (prepared.leg == PodRole::kPrefill) out["leg"] = "prefill";
  if (prepared.decode) out["decode"] = decisionJson(*prepared.decode);
  if (!prepared.pd_outcome.empty()) out["disaggregation"] = prepared.pd_outcome;
  out["tokens_source"] = tokensSource(request);
  if (request.remote_token_ids) out["remote_tokens"] = request.remote_token_ids->size();
  // The dialect spoken to the pod that tokenized (or failed to): absent for a cache hit, which keeps no pod.
  if (!tokenized.engine.empty()) out["tokens_engine"] = tokenized.engine;
  if (tokenized.engine_assumed) out["tokens_engine_assumed"] = true;
  co_return AdminResponse{200, "application/json", out.dump(), {}};
}

// One decision as /debug/route explains it: the strategy, the pick, and every candidate's numbers.
json decisionJson(const routing::Decision& d) {
  json pods = json::array();
  for (size_t i = 0; i < d.candidates.size(); ++i) {
    const routing::Candidate& c = d.candidates[i];
    pods.push_back({{"name", c.pod->name()},
                    {"match_percent", c.match_percent < 0 ? json(nullptr) : json(c.match_percent)},
                    {"load_score", std::isnan(c.load_score) ? json(nullptr) : json(c.load_score)},
                    {"score", c.excluded ? json(nullptr) : json(c.score)},
                    {"in_flight", c.in_flight},
                    {"in_flight_tokens", c.in_flight_tokens},
                    {"waiting", c.waiting},
                    {"kv_cache_usage", std::isnan(c.kv_usage) ? json(nullptr) : json(c.kv_usage)},
                    {"capacity_tokens_per_s", c.capacity},
                    {"prefill_requests", c.prefill_requests},
                    {"prefill_tokens", c.prefill_tokens},
                    // Filtered out before scoring (KV cache nearly full): never picked while another pod is not.
                    {"excluded", c.excluded}});
    // The scorer's explanation under its name (the wait scorer's "wait": its estimate and parts in ms).
    const routing::Explanation* explained = i < d.explanations.size() ? &d.explanations[i] : nullptr;
    if (const routing::ExplanationKeys* keys = explained ? explained->keys : nullptr) {
      json parts = json::object();
      for (size_t k = 0; k < keys->size && k < routing::Explanation::kMax; ++k)
        parts[std::string(keys->keys[k])] = explained->values[k];
      pods.back()[std::string(keys->name)] = std::move(parts);
    }
  }
  json out{{"strategy", d.strategy}, {"pod", d.pod->name()}, {"pods", pods}};
  out["match_percent"] = d.match_percent < 0 ? json(nullptr) : json(d.match_percent);
  if (!d.outcome.empty()) out["selection"] = d.outcome;
  for (const auto& [key, value] : d.details) out[key] = value;
  return out;
}

std::string_view pathOf(const http::request_header<>& req) { return req.target().substr(0, req.target().find('?')); }

// The probes' paths: open on both listeners, without a token, so the kubelet needs no credentials.
bool isProbe(std::string_view path) { return path == "/healthz" || path == "/readyz"; }

// A 401 unless auth.admin_token_file is unset or the request carries its token (compared in constant time).
std::optional<AdminResponse> checkToken(const AdminServices& admin, const http::request_header<>& req) {
  std::shared_ptr<const std::string> token = admin.credentials.adminToken();
  if (!token || isProbe(pathOf(req))) return std::nullopt;
  if (auth::constantTimeEquals(auth::bearerToken(req[http::field::authorization]), *token)) return std::nullopt;
  AdminResponse res = errorResponse(openai::GatewayError::kUnauthorized, "the admin API needs 'authorization: Bearer <token>' (auth.admin_token_file)");
  res.headers.emplace_back("www-authenticate", "Bearer");
  return res;
}

AdminResponse handle(const AdminServices& admin, http::request<http::string_body>& req, bool health_only) {
  std::string_view path = pathOf(req);
  const bool get = req.method() == http::verb::get;
  if (path == "/healthz" && get) return {200, "text/plain", "ok\n", {}};
  if (path == "/readyz" && get) {
    if (admin.draining.load(std::memory_order_acquire)) return {503, "text/plain", "draining\n", {}};
    const int64_t now = routing::steadyNowMs();
    for (const auto& pod : admin.pods.snapshot()->pods())
      if (pod->ready(now)) return {200, "text/plain", "ready\n", {}};
    return {503, "text/plain", "no ready pod\n", {}};
  }
  if (health_only) {
    if (isProbe(path)) return errorResponse(openai::GatewayError::kMethodNotAllowed, "method not allowed");
    return errorResponse(openai::GatewayError::kNotFound, "the health listener serves only /healthz and /readyz");
  }
  if (path == "/metrics" && get)
    return {200, "text/plain; version=0.0.4; charset=utf-8",
            admin.metrics.serialize(*admin.pods.snapshot(), routing::steadyNowMs()), {}};
  if (path == "/debug/pods" && get) return {200, "application/json", podsJson(admin).dump(2), {}};
  if (path == "/debug/queues" && get) {
    nlohmann::json queues = admin.flow ? admin.flow->snapshot() : nlohmann::json{{"enabled", false}};
    return {200, "application/json", queues.dump(2), {}};
  }
  if (isProbe(path) || path == "/metrics" || path == "/debug/pods" || path == "/debug/route" || path == "/debug/queues")
    return errorResponse(openai::GatewayError::kMethodNotAllowed, "method not allowed");
  return errorResponse(openai::GatewayError::kNotFound, "unknown admin path '" + openai::printable(path) + "'");
}

// Reads one request: the first byte within limits.client_idle_timeout_ms (keep-alive), then the head and the body
// within limits.header_timeout_ms each. A refusal (size, timeout, malformed) comes back as `refused`.
asio::awaitable<bool> readAdminRequest(beast::tcp_stream& stream, beast::flat_buffer& buffer,
                                       http::request_parser<http::string_body>& parser, const config::LimitsConfig& limits,
                                       std::optional<AdminResponse>& refused) {
  error_code ec;
  if (buffer.size() == 0) {
    stream.expires_after(std::chrono::milliseconds(limits.client_idle_timeout_ms));
    size_t n = co_await stream.async_read_some(buffer.prepare(kFirstReadBytes), asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return false;
    buffer.commit(n);
  }
  parser.header_limit(limits.max_header_bytes);
  parser.body_limit(limits.admin_max_body_bytes);
  stream.expires_after(std::chrono::milliseconds(limits.header_timeout_ms));
  co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (!ec) {
    stream.expires_after(std::chrono::milliseconds(limits.header_timeout_ms));
    co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  }
  if (!ec) co_return true;
  // Beast checks a Content-Length against the limit with the head: an oversized body is refused unread.
  if (ec == http::error::body_limit)
    refused = errorResponse(openai::GatewayError::kBodyTooLarge, "admin request body is larger than limits.admin_max_body_bytes (" +
                                     std::to_string(limits.admin_max_body_bytes) + " bytes)");
  else if (ec == http::error::header_limit)
    refused = errorResponse(openai::GatewayError::kHeaderTooLarge, "request header is larger than limits.max_header_bytes");
  else if (ec == beast::error::timeout)
    refused = errorResponse(openai::GatewayError::kHeaderTimeout, "request not received within limits.header_timeout_ms");
  else if (ec != http::error::end_of_stream && ec != asio::error::eof && ec != asio::error::connection_reset)
    refused = errorResponse(openai::GatewayError::kMalformedHttp, "malformed HTTP request: " + ec.message());
  co_return false;
}

asio::awaitable<void> serveAdmin(ControlPlane& control, asio::ip::tcp::socket socket, bool health_only) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  const AdminServices& admin = *control.admin;
  const config::LimitsConfig& limits = admin.config.limits;
  for (;;) {
    http::request_parser<http::string_body> parser;
    std::optional<AdminResponse> refused;
    if (!co_await readAdminRequest(stream, buffer, parser, limits, refused)) {
      if (refused) {
        stream.expires_after(std::chrono::milliseconds(limits.header_timeout_ms));
        co_await writeResponse(stream, refused->status, refused->content_type, std::move(refused->body), false);
      }
      break;
    }
    auto& req = parser.get();
    const bool debug_route = !health_only && pathOf(req) == "/debug/route" && req.method() == http::verb::post;
    AdminResponse res;
    if (auto unauthorized = health_only ? std::nullopt : checkToken(admin, req)) res = std::move(*unauthorized);
    else if (debug_route) res = co_await debugRoute(control, req);
    else res = handle(admin, req, health_only);
    bool keep_alive = req.keep_alive();
    // A client that stops reading loses its connection after the same deadline as a slow sender.
    stream.expires_after(std::chrono::milliseconds(limits.header_timeout_ms));
    if (!co_await writeResponse(stream, res.status, res.content_type, std::move(res.body), keep_alive, res.headers) ||
        !keep_alive)
      break;
  }
  error_code ignored;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace

namespace {
void acceptOn(ControlPlane& control, asio::ip::tcp::acceptor& acceptor, bool health_only) {
  acceptor.async_accept([&control, &acceptor, health_only](error_code ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) asio::co_spawn(control.io, serveAdmin(control, std::move(socket), health_only), asio::detached);
    acceptOn(control, acceptor, health_only);
  });
}
}  // namespace

void startAdmin(ControlPlane& control) {
  acceptOn(control, control.admin_acceptor, false);
  if (control.health_acceptor.is_open()) acceptOn(control, control.health_acceptor, true);
}

}  // namespace prefixgate::server
