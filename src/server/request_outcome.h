#pragma once
// The one place every request's outcome passes through (success, client error, upstream error, timeout, client
// gone): it counts the request as active while it lives, and on destruction writes the log line and the metrics.
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <optional>
#include <span>
#include <string>

#include "discovery/pod_set.h"
#include "metrics/gateway_metrics.h"
#include "openai/errors.h"
#include "openai/request.h"
#include "proxy/relay.h"
#include "routing/router.h"
#include "server/request_log.h"
#include "server/responses.h"
#include "trace/tracer.h"
#include "util/recycling_allocator.h"

namespace prefixgate::server {

// Where every request's outcome is counted: the metrics, which models pods serve (a metric's model label), and the
// requests in flight (draining and limits.max_in_flight read them). Each outlives the outcomes.
struct OutcomeSinks {
  metrics::GatewayMetrics& metrics;
  const discovery::PodRegistry& pods;
  std::atomic<int64_t>& active_requests;
  // Tracing (tracing.otlp_endpoint set): each request's trace and server span; null = off.
  const trace::Tracer* tracer = nullptr;
};

// The longest x-request-id a client may give (a longer or unprintable one is replaced by a new id).
inline constexpr size_t kMaxRequestIdBytes = 128;
// A new request id's length: 32 hex digits.
inline constexpr size_t kNewRequestIdBytes = 32;

class RequestOutcome {
 public:
  explicit RequestOutcome(const OutcomeSinks& sinks) : sinks_(sinks) {}
  ~RequestOutcome();
  RequestOutcome(const RequestOutcome&) = delete;
  RequestOutcome& operator=(const RequestOutcome&) = delete;

  // The request head arrived: take (or make) its id and start the clock.
  void begin(const proxy::ClientHead& head);
  void setRequest(const openai::RequestView& request);
  void setDecision(const routing::Decision& decision, const proxy::RelayOutcome& relayed);
  // A disaggregated model's request: how it was split (GatewayMetrics::kPdOutcomes; "" = not a disaggregated
  // model's), its prefill leg's decision and outcome (null in sidecar mode, or none), and the KV hand-off (the
  // decode leg's response head after the prefill answer; -1 = none). Logged and counted at the end.
  void setDisaggregation(std::string_view outcome, const routing::Decision* prefill = nullptr,
                         const proxy::PrefillLegOutcome* leg = nullptr, double handoff_seconds = -1);
  // The request waited at the gateway for its pod's busy slot this long (slot waits; logged as slot_wait_ms).
  void setSlotWait(double seconds) { slot_wait_seconds_ = seconds; }
  // Why the prefill answer's kv_transfer_params could not be used (the request then decodes aggregated).
  void noteTransfer(std::string reason) { transfer_note_ = std::move(reason); }
  // The request ends with a gateway-made error (openai/errors.h gives its status and label).
  void fail(openai::GatewayError error, std::string message);
  void succeed(int status) { status_ = status; }
  // The name of the API key the request presented (logged as key=; never the key itself).
  void setKey(std::string name) { key_ = std::move(name); }

  std::string_view requestId() const { return {request_id_.data(), request_id_size_}; }
  int status() const { return status_; }
  const std::string& message() const { return message_; }
  // Headers every gateway-made response carries.
  HeaderList headers() const { return {{"request-id", std::string(requestId())}}; }
  // The request's trace once its head arrived, with tracing on; null else.
  trace::RequestTrace* trace() { return trace_ ? &*trace_ : nullptr; }

 private:
  // The line of a request that failed before its head was complete (no id, method or path yet).
  void logIncompleteHead() const;
  // The request line's fields (views of this outcome), `seconds` after the head arrived.
  RequestLogEntry logEntry(double seconds) const;
  // Fills the request's server span from what the outcome knows (docs/configuration.md, "Tracing") and sends it.
  void endTrace();

  const OutcomeSinks& sinks_;
  bool begun_ = false;
  std::chrono::steady_clock::time_point start_;
  // The client's x-request-id (<= kMaxRequestIdBytes printable bytes) or a new one, in place: a request's id
  // costs no allocation.
  std::array<char, kMaxRequestIdBytes> request_id_;
  size_t request_id_size_ = 0;
  std::string method_;
  util::RecycledString path_;  // most paths are longer than a string's in-place 15 characters
  std::string trace_id_;  // from a valid traceparent header; "" = none
  std::string model_;
  bool stream_ = false;
  std::string strategy_;
  std::string pod_;
  std::string key_;
  int match_percent_ = -1;
  int status_ = 0;
  std::string reason_;
  std::string message_;
  double first_byte_seconds_ = -1;
  double slot_wait_seconds_ = -1;
  int retries_ = 0;
  int stale_retries_ = 0;
  uint64_t output_tokens_ = 0;
  std::optional<uint64_t> engine_cached_tokens_;  // usage.prompt_tokens_details.cached_tokens, when reported
  std::optional<routing::PredictionAudit> audit_;  // set when the response is audited
  // Disaggregated prefill/decode (setDisaggregation).
  std::string_view pd_outcome_;
  std::string prefill_pod_;
  int prefill_match_percent_ = -1;
  double prefill_seconds_ = -1;
  double handoff_seconds_ = -1;
  int prefill_retries_ = 0;
  std::optional<routing::PredictionAudit> prefill_audit_;
  std::string transfer_note_;
  // Tracing (sinks_.tracer set): what the server span says beyond the log line's fields.
  std::optional<openai::Endpoint> endpoint_;
  std::optional<uint64_t> prompt_tokens_;  // the engine's usage.prompt_tokens
  std::string response_id_;                // the Responses API's answer id, when read
  std::optional<trace::RequestTrace> trace_;  // last: its span is sent from what the fields above say
};

// A random request id: 32 hex digits, from the calling thread's generator, written to `out`.
void writeRequestId(std::span<char, kNewRequestIdBytes> out);
std::string newRequestId();  // the same, as a string
// Seeds the calling thread's request-id generator (an event-loop thread, before it serves anything), so ids are
// reproducible under random_seed. A thread that never calls it draws its seed from std::random_device.
void seedRequestIds(uint64_t seed);

}  // namespace prefixgate::server
