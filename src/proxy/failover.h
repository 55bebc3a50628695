#pragma once
// What the relay does after one attempt on one pod, as pure functions of the attempts so far: relay the answer,
// retry the same pod on a fresh connection, switch pod, or give up; and whom each failure is reported against
// (the pod, the request, or nobody). No sockets, no clocks: unit-tested on plain values.
#include <cstdint>
#include <span>
#include <string_view>

#include "openai/errors.h"
#include "routing/ticket.h"

namespace prefixgate::discovery {
class PodState;
}

namespace prefixgate::proxy {

// How one attempt (or the response body after it) ended.
enum class FailureKind {
  kNone,                   // the pod answered (a final head below 500) and, for the body, relayed it whole
  kConnect,                // connection refused or unreachable, or the host name did not resolve
  kConnectTimeout,         // no connection within upstream.connect_timeout_ms
  kLocal,                  // this process could not open a socket (EMFILE, ENFILE, ENOBUFS, EADDRNOTAVAIL)
  kClosedBeforeResponse,   // reset or closed after the request was sent, before any response byte
  kBadResponse,            // the response head could not be parsed
  kEngineError,            // a 5xx response head
  kResponseHeaderTimeout,  // no response head within upstream.response_header_timeout_ms
  kIdleTimeout,            // the body stalled longer than upstream.idle_timeout_ms
  kInterrupted,            // the body was cut off (reset, close, bad framing) after the head
  kResponseTooLarge,       // the body exceeded upstream.max_response_bytes
  kClientGone,             // the client hung up
};

// The gateway error (openai/errors.h: status, OpenAI type, label) a failure is answered with when nothing reached
// the client yet (kNone: not an error).
openai::GatewayError errorFor(FailureKind kind);
// Its metric label (prefixgate_upstream_errors_total{reason}, prefixgate_retries_total{reason}): the table's.
std::string_view failureLabel(FailureKind kind);

// Whom a failure counts against. A pod failure cannot be caused by the request; a suspect one may be (a body
// that makes the engine drop the connection or answer 5xx); the rest say nothing about the pod.
enum class Blame { kNone, kPod, kSuspect };
Blame blameOf(FailureKind kind);

struct Attempt {
  discovery::PodState* pod = nullptr;  // not owned; alive for the request (its Decision holds it)
  FailureKind failure = FailureKind::kNone;
  bool reused_connection = false;  // the attempt ran on a pooled connection
  bool response_started = false;   // a response byte reached the client
  bool reported = false;           // its verdict already went to the sink (reportPodFailure)
};

enum class NextStep { kRelay, kRetryFresh, kSwitchPod, kGiveUp };

// The rules: a reused pooled connection that failed before any response byte is retried once on a fresh one
// (vLLM closes idle keep-alive connections), and that retry is not a pod switch; up to `max_retries` pod switches
// follow connection failures, closes before the response and 5xx answers; timeouts, local errors and size limits
// are not retried; nothing is retried after a response byte reached the client. `attempts` is never empty.
NextStep nextStep(std::span<const Attempt> attempts, uint32_t max_retries);

// Receives the health verdicts of one request's attempts (what routing learns goes through the decision's ticket). Implementations are
// thread-safe (every event loop reports); the pods stay alive for the call.
class HealthSink {
 public:
  virtual ~HealthSink() = default;
  // The pod failed in a way no request can cause (refused, connect or response timeout).
  virtual void podFailed(discovery::PodState& pod) = 0;
  // The pod failed in a way this request may have caused; `request_hash` tells requests apart.
  virtual void requestFailed(discovery::PodState& pod, uint64_t request_hash) = 0;
  // The pod served the request.
  virtual void succeeded(discovery::PodState& pod) = 0;
};

// Reports a failure no request can cause at once, as the attempt ends (not after another pod's whole response,
// which may stream for minutes while new requests keep trying the failed pod); marks the attempt reported.
void reportPodFailure(Attempt& attempt, HealthSink& sink);

// Reports every attempt of a finished request not reported yet: stale pooled connections and client hang-ups count for nobody; a
// request whose suspect failures happened on two or more pods is the request's fault and counts for none of them.
void reportHealth(std::span<const Attempt> attempts, std::string_view request_body, HealthSink& sink);

// What routing is told of a failed attempt (routing::Ticket::attemptFailed): whether the engine may have computed
// the prompt. Refused, unreachable, closed before answering or a 5xx: it did not; otherwise it may have.
routing::AttemptFailure attemptFailureOf(FailureKind kind);

// Tells requests apart for the ejection policy (a hash of the body).
uint64_t requestHash(std::string_view body);

}  // namespace prefixgate::proxy
