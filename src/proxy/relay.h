#pragma once
// Proxying one request to a chosen pod and streaming the response back: pooled upstream connection, headers
// rewritten (hop-by-hop out, gateway headers in), body relayed through a small buffer so each SSE event reaches
// the client as soon as the engine sends it. Each try is one attempt (upstream_attempt.h); what follows it, and
// whom its failure counts against, is decided by the pure rules of failover.h.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "config/config.h"
#include "openai/errors.h"
#include "proxy/client_head.h"
#include "proxy/failover.h"
#include "proxy/head_text.h"
#include "proxy/upstream_pool.h"
#include "routing/router.h"
#include "util/recycling_allocator.h"

namespace prefixgate::trace {
class RequestTrace;
}

namespace prefixgate::proxy {

struct RelayRequest {
  boost::beast::tcp_stream& client;
  UpstreamPool& pool;
  const config::UpstreamConfig& config;
  HealthSink& health;  // receives each attempt's verdict (passive ejection)
  const ClientHead& head;  // the client's request head
  const std::string& body;                           // passed to the engine unchanged
  std::string_view request_id;
  // The connection's buffer for the heads the relay writes (the engine's request, then the client's response):
  // reused from request to request, so writing a head allocates nothing in the steady state.
  std::string& head_buffer;
  bool client_keep_alive = true;
  // Chooses another pod for the request of `failed` (excluding those tried) when an attempt failed and failover
  // allows a switch (routing::Router::chooseAgain).
  std::function<routing::Decision(routing::Decision& failed, std::span<const PodId> exclude)> choose_again;
  // The client connection's read buffer: bytes the client sends while the response runs (its next, pipelined
  // request) are appended to it, up to its max_size, so its hang-up is still seen behind them. Null: watching
  // stops at the first such byte.
  boost::beast::flat_buffer* pipelined = nullptr;
  // Disaggregated prefill/decode: the prefill leg's pod, named to the client in a `prefill-pod` header ("" = none),
  // and in sidecar mode the prefill pod's host:port for the decode pod's sidecar (x-prefiller-host-port; "" = none).
  // A client's own x-prefiller-* headers never reach an engine.
  std::string_view prefill_pod;
  std::string_view prefiller_host_port;
  // The client's API: a stream the engine cuts short ends with that API's error event (Anthropic's `event: error`).
  openai::ErrorShape error_shape = openai::ErrorShape::kOpenAI;
  // The Responses API: read the answer's response id (RelayOutcome::response_id) for chain affinity.
  bool capture_response_id = false;
  // With capture_response_id: told the id and the pod of a 2xx answer as soon as the id is read, before the bytes
  // that carry it go to the client, so a client that has the id can already use it (GET /v1/responses/{id},
  // previous_response_id) on any connection. Empty: nobody is told.
  std::function<void(const std::string& response_id, const std::string& pod)> on_response_id;
  // Tracing (docs/configuration.md, "Tracing"): each attempt is a client span of this request's trace and tells the
  // engine its traceparent; the first body bytes are an event on the request's span. Null: tracing off.
  trace::RequestTrace* trace = nullptr;
};

struct RelayOutcome {
  int status = 0;                 // the status sent to the client (or to be sent, when !response_started)
  bool response_started = false;  // a response head went to the client: nothing more may be sent but its end
  bool client_gone = false;       // the client closed its connection before the end
  bool keep_client = false;       // the client connection may serve another request
  std::string error;              // why it failed, for the log ("" on success)
  FailureKind failure = FailureKind::kNone;  // why it failed (the gateway's error table maps it)
  std::string error_reason;       // metric label: failureLabel(failure), "" on success
  double first_byte_seconds = -1;  // request start to the engine's response head
  // Request start to the first body byte (a stream's first token: the engine has computed the prompt); -1 = none.
  double first_body_seconds = -1;
  int retries = 0;        // attempts on another pod
  int stale_retries = 0;  // the request sent again on a fresh connection after a pooled one turned out closed
  uint64_t output_tokens = 0;     // counted on the way through (usage, else SSE events)
  // The engine's usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens, last values seen in the body
  // (empty when absent); the prediction audit compares them with the router's prediction.
  std::optional<uint64_t> prompt_tokens;
  std::optional<uint64_t> cached_tokens;
  // The gateway's own count of the prompt (the last pod's ticket's prompt_tokens); -1 = none.
  int64_t counted_prompt_tokens = -1;
  // The prediction audit of the response (routing::Ticket::completed): empty when not audited.
  std::optional<routing::PredictionAudit> audit;
  // With RelayRequest::capture_response_id: the answer's response id (proxy/response_id_scanner.h), "" when none.
  std::string response_id;
};

// The prefill leg of a disaggregated request (connector protocol, docs/disaggregation-protocols.md): what its
// prefill pod answered.
struct PrefillLegOutcome {
  // kNone: a whole answer came (status says which; only a 2xx carries kv_transfer_params); kEngineError: the last
  // prefill pod answered 5xx (answer holds it); else the leg failed before an answer (error says why).
  FailureKind failure = FailureKind::kNone;
  int status = 0;
  std::string answer;  // the pod's whole (non-streamed) answer body
  std::string error;
  double seconds = -1;  // the leg, from its first attempt to the answer's last byte
  int retries = 0;
  std::optional<uint64_t> prompt_tokens;  // the prefill pod's usage
  std::optional<uint64_t> cached_tokens;
  std::optional<routing::PredictionAudit> audit;  // the prefill pod's prediction audit
};

// Sends `request` (its body the prefill leg's, pd::prefillBody) to `decision`'s pod and reads its whole answer,
// at most `max_answer_bytes`; failover as relay() does, to other prefill pods. Tells the ticket firstByte at the
// answer, attemptFailed per failed attempt, completed at the end. Nothing is written to the client, whose hang-up
// ends the leg (kClientGone).
boost::asio::awaitable<PrefillLegOutcome> prefillLeg(RelayRequest& request, routing::Decision& decision,
                                                     size_t max_answer_bytes);

// Runs on the client's event-loop thread. `decision` may be replaced (another pod) when failover.h says so; its
// in-flight count always ends up on the pod that served (or last failed) the request. The relay tells each
// decision's ticket what happened: firstByte at the engine's first body bytes, attemptFailed for an attempt that
// failed (not a stale pooled connection retried on the same pod), completed when the response ended.
boost::asio::awaitable<RelayOutcome> relay(RelayRequest& request, routing::Decision& decision);

}  // namespace prefixgate::proxy
