#pragma once
// The steps of a client request between its body and its relay, in one place for the proxy path
// (server/client_session.cpp) and the admin's dry run (/debug/route): parse the body once (openai/request.h),
// check the API key's models and limits and the gateway's in-flight bound, build the route query from the
// request's headers, ask the remote tokenizer for the prompt's tokens when the strategy hashes prompts, and choose
// the pod. Every dependency is handed to it at construction: it never reaches for the gateway, and its tests build
// it from a Router over a few pods and a fake tokenizer.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/string.hpp>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "openai/errors.h"
#include "openai/request.h"
#include "routing/router.h"
#include "server/flow_gate.h"
#include "util/log.h"

namespace prefixgate::auth {
class Credentials;
}
namespace prefixgate::metrics {
class ApiKeyMetrics;
class GatewayMetrics;
}  // namespace prefixgate::metrics
namespace prefixgate::routing {
class PrefixMetrics;
class ResponseAffinity;
}  // namespace prefixgate::routing
namespace prefixgate::trace {
class RequestTrace;
struct Span;
}  // namespace prefixgate::trace
namespace prefixgate::tokenize {
class ConnectionPool;
class PromptTokenizer;
struct TokenizeResult;
}  // namespace prefixgate::tokenize

namespace prefixgate::server {

class ClientAuth;

// The request headers routing reads: views into the request head, valid while it lives ("" when absent).
struct RouteHeaders {
  std::string_view routing_strategy;  // `routing-strategy`: overrides the configured strategy
  std::string_view config_profile;    // `config-profile`: the model's profile
  std::string_view session_id;        // `x-session-id`: session-affinity's pin
  // Flow control: flow_control.tenant_header, `x-request-priority`, `x-slo-ttft-ms`.
  std::string_view tenant;
  std::string_view priority;
  std::string_view slo_ttft_ms;
};
// Reads them from a Beast head (any fields type: the client's and the admin listener's differ); `tenant_header` is
// flow_control.tenant_header.
// One pass over the fields, the first of each name kept (as Beast's operator[] gives it): a lookup by name each
// walked the fields' ordered tree with case-insensitive comparisons, six times per request.
template <class Head>
RouteHeaders routeHeaders(const Head& head, std::string_view tenant_header) {
  RouteHeaders h;
  const std::pair<std::string_view, std::string_view*> wanted[] = {
      {"routing-strategy", &h.routing_strategy}, {"config-profile", &h.config_profile},
      {"x-session-id", &h.session_id},           {tenant_header, &h.tenant},
      {flow::kPriorityHeader, &h.priority},      {flow::kSloTtftHeader, &h.slo_ttft_ms}};
  bool found[std::size(wanted)] = {};
  for (const auto& field : head) {
    const auto name = field.name_string();
    for (size_t i = 0; i < std::size(wanted); ++i) {
      if (found[i] || name.size() != wanted[i].first.size() || !boost::beast::iequals(name, wanted[i].first)) continue;
      const auto value = field.value();
      *wanted[i].second = std::string_view(value.data(), value.size());
      found[i] = true;
    }
  }
  return h;
}

// What the remote tokenizer did for one request, for /debug/route.
struct RemoteTokensReport {
  std::string_view outcome;     // tokenize::outcomeLabel; "" when it was not asked
  // The dialect spoken to the pod that answered or failed ("vllm", "sglang", "llamacpp"; for "unsupported" the one
  // that cannot); "" when no pod was asked (a cache hit keeps tokens, not who made them; no_pod; not asked).
  std::string_view engine;
  bool engine_assumed = false;  // that pod's engine was not recognised yet: it was spoken to as vLLM
};

// Where the tokens of the decision came from, for /debug/route: "remote", "remote_failed" or "local".
std::string_view tokensSource(const openai::RequestView& request);

// Why the gateway answers a request itself instead of routing it: one kind of openai/errors.h (its status, type
// and label) and the client's message.
struct PrepareRefusal {
  openai::GatewayError error = openai::GatewayError::kInvalidRequest;
  std::string message;
  std::string param;           // the request field at fault ("" = none)
  uint32_t retry_after_s = 0;  // an API key's limit: seconds until it frees up (0 = the kind's own retry-after)
};

// One request to prepare. Its references outlive the preparation (the session's or admin handler's coroutine).
struct RequestToPrepare {
  openai::Endpoint endpoint = openai::Endpoint::kChatCompletions;
  std::string& body;     // parsed in place (simdjson's padding may grow it once); PreparedRequest views point into it
  RouteHeaders headers;  // views into the request head, which outlives the PreparedRequest
  std::mt19937_64& rng;  // the calling thread's generator (ties, random strategies)
  // The request's API key, authenticated on its head; null: no key check (the admin's dry run).
  ClientAuth* auth = nullptr;
  // The calling thread's connections, shared by the remote tokenizer with the relay; null: fresh ones.
  tokenize::ConnectionPool* connections = nullptr;
  // /debug/route: decide and explain, but record and count nothing (no key allowance, no in-flight count, no
  // metrics, no index record), and the gateway's in-flight bound does not apply.
  bool dry_run = false;
  // The client connection, watched while the request waits in flow control's queue (null: not watched), and its
  // read buffer (bytes it sends meanwhile: see proxy::ClientWatch).
  boost::beast::tcp_stream* client = nullptr;
  boost::beast::flat_buffer* pipelined = nullptr;
  // Tracing: the tokenize and route steps become spans of this request's trace. Null: tracing off (or a dry run).
  trace::RequestTrace* trace = nullptr;
};

// A prepared request: either refused, or routed (decision.pod set, its in-flight count taken unless a dry run).
struct PreparedRequest {
  PreparedRequest() = default;
  PreparedRequest(const PreparedRequest&) = delete;
  PreparedRequest& operator=(const PreparedRequest&) = delete;
  // Gives the prompt text's capacity back to the thread (util::StringPool) for the next request's parse.
  ~PreparedRequest();

  // Flow control's hold on the request (first, so it ends last: after the decisions' tickets gave back their
  // in-flight counts, so the queue it serves sees the room). Empty when flow control is off or for a dry run.
  FlowPass flow;
  openai::RequestView request;            // as parsed (partly, when the body was refused), with remote tokens
  std::optional<PrepareRefusal> refusal;  // set: answer it; nothing was chosen
  routing::Decision decision;             // the choice when there is no refusal
  RemoteTokensReport tokens;              // what the remote tokenizer did
  RouteHeaders headers;
  bool dry_run = false;
  // Disaggregated prefill/decode: `decision` is the prefill leg's (leg kPrefill) and `decode` the decode leg's; else
  // leg is kBoth (a whole request) and decode is empty.
  PodRole leg = PodRole::kBoth;
  std::optional<routing::Decision> decode;
  // A disaggregated model's request served whole: "aggregated" (disaggregation.aggregate_below_tokens) or
  // "prefill_busy" (disaggregation.max_prefill_in_flight); "" else.
  std::string_view pd_outcome;
  // The Responses API's chain affinity: the pod that produced the response named by the body's
  // previous_response_id (routing::ResponseAffinity), chosen whenever it is a candidate; "" when none is remembered.
  std::string preferred_pod;
  // How long the request waited at the gateway for its pod's busy slot (slot waits); -1 = it did not wait.
  double slot_wait_seconds = -1;
  // The query the decision answered, for choosing again without `exclude`'s pods. Views into this object.
  routing::RouteQuery query(std::span<const PodId> exclude = {}) const {
    return {request, headers.routing_strategy, headers.config_profile, exclude, dry_run, leg, preferred_pod};
  }
};

class RequestPreparation {
 public:
  // Everything it reads or counts into; each outlives it. Thread-safe objects: one preparation serves every event
  // loop and the control thread.
  struct Deps {
    // limits.max_json_depth, limits.max_in_flight, routing.prefix_cache.include_tools.
    const config::Config& config;
    routing::Router& router;
    // Which models pods serve: a model none serves is refused by the router without asking the tokenizer.
    const discovery::PodRegistry& pods;
    const auth::Credentials& credentials;      // the API keys in force (ClientAuth)
    metrics::ApiKeyMetrics& api_key_metrics;   // prefixgate_api_key_*
    metrics::GatewayMetrics& metrics;          // prefixgate_remote_tokenizer_*
    routing::PrefixMetrics& prefix_metrics;    // aibrix_prefix_cache_routing_errors_total{reason="tokenize_failed"}
    // The gateway's requests in flight, this one included (RequestOutcome counts them): limits.max_in_flight.
    const std::atomic<int64_t>& active_requests;
    // The engine /tokenize client (routing.prefix_cache.use_remote_tokenizer or kv_event_sync); null when off.
    tokenize::PromptTokenizer* tokenizer = nullptr;
    // Flow control (flow_control.enabled); null: requests are never held.
    FlowGate* flow = nullptr;
    // The Responses API's response id -> pod map (chain affinity); null: requests go where the strategy says.
    routing::ResponseAffinity* response_affinity = nullptr;
  };
  explicit RequestPreparation(const Deps& deps);
  RequestPreparation(const RequestPreparation&) = delete;
  RequestPreparation& operator=(const RequestPreparation&) = delete;

  // A new request's API key side, with the key set in force now: authenticate it on the head (before the body is
  // read, so an unauthenticated client costs no body memory), then hand it to prepare().
  ClientAuth clientAuth() const;

  // Parse -> (unless a dry run) the key's models and limits, the in-flight bound -> the route query -> the remote
  // tokenizer's tokens, when on and the strategy hashes prompts -> Router::choose (for a disaggregated model: the
  // prefill leg's pod, then Router::chooseDecode the decode leg's, unless it is served whole). Stops at the first refusal:
  // nothing after it runs (a refused key is never tokenized). Fills `out`, which must outlive the decision. Runs on
  // the calling coroutine's executor, never blocks it, and completes within
  // routing.prefix_cache.remote_tokenizer_timeout_ms. Unless a dry run, counts the tokenizer's outcome
  // (prefixgate_remote_tokenizer_*, and aibrix_prefix_cache_routing_errors_total{reason="tokenize_failed"} whenever
  // no tokens came) and logs why (throttled).
  boost::asio::awaitable<void> prepare(RequestToPrepare in, PreparedRequest& out);

  // Whether a disaggregated model's request is served whole by one pod instead: fewer prompt tokens than
  // disaggregation.aggregate_below_tokens, or fewer not cached on the pod a whole request would go to.
  bool servedWhole(const routing::RoutePlan& plan, const routing::RouteQuery& query, std::mt19937_64& rng);
  // What flow control needs of a parsed request (its flow's sources, size and connection).
  FlowAdmission flowAdmission(const RequestToPrepare& in, const openai::RequestView& request) const;

  // Another pod for a prepared request whose attempt on `failed`'s pod failed, none of `exclude` (the relay's
  // failover): the same plan and prompt blocks (routing::Router::chooseAgain). Thread-safe; never blocks.
  routing::Decision chooseAgain(const PreparedRequest& prepared, routing::Decision& failed,
                                std::span<const PodId> exclude, std::mt19937_64& rng);

 private:
  std::optional<PrepareRefusal> admit(const RequestToPrepare& in, const openai::RequestView& request) const;
  // prepare()'s steps between its waits (plain functions: their temporaries stay off the coroutine's frame).
  // Parses the body and admits the request (its key, the gateway's bound); false: out.refusal says why.
  bool parseAndAdmit(const RequestToPrepare& in, PreparedRequest& out);
  // The strategy and the query a request resolves to, and whether its model is disaggregated (out.leg set).
  struct RouteStep {
    bool disaggregated = false;
    routing::RouteQuery query;
    routing::RoutePlan plan;
  };
  RouteStep planRoute(PreparedRequest& out) const;
  static void endTokenizeSpan(trace::RequestTrace& trace, trace::Span span, const PreparedRequest& out);
  // Chooses the pod (and a disaggregated request's decode pod), or sets out.refusal.
  void route(RequestToPrepare& in, PreparedRequest& out, RouteStep& step);
  // The decision queued the request for a busy slot of its pod (slot waits): waits for its turn, at most
  // routing.prefix_cache.slot_wait_ms, watching the client (a hang-up ends the wait: out.refusal kClientGone, the
  // decision's record withdrawn), and counts it.
  boost::asio::awaitable<void> waitForSlot(const RequestToPrepare& in, PreparedRequest& out);
  // Whether the engine's tokenizer is to be asked for the request's tokens (`plan` wants them, a remote tokenizer is
  // configured and can answer for the request); clears the request's remote tokens. A plain function, so a request
  // that asks nothing costs no coroutine frame.
  bool asksRemoteTokens(const routing::RoutePlan& plan, openai::RequestView& request) const;
  // Asks it (asksRemoteTokens said so).
  boost::asio::awaitable<RemoteTokensReport> fetchRemoteTokens(const routing::RouteQuery& query,
                                                               openai::RequestView& request,
                                                               tokenize::ConnectionPool* connections);
  void warnThrottled(const openai::RequestView& request, const tokenize::TokenizeResult& result);
  // Chain affinity: the pod of the body's previous_response_id, into out.preferred_pod (counted unless a dry run).
  void followPreviousResponse(PreparedRequest& out) const;
  // Counts whether the decision went to out.preferred_pod (hit) or could not (the pod was no candidate).
  void countPreviousResponse(const PreparedRequest& out) const;

  Deps deps_;
  // When no engine answers, every request fails the same way: one warning a second says so without flooding.
  log::Throttle tokenize_warnings_;
};

}  // namespace prefixgate::server
