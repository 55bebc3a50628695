#include "server/request_outcome.h"

#include <array>
#include <cstring>
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "config/random_seed.h"
#include "routing/prefix/prefix_services.h"
#include "server/request_log.h"
#include "trace/span_names.h"
#include "util/log.h"
#include "util/traceparent.h"

namespace prefixgate::server {
namespace http = boost::beast::http;

namespace {
// Per thread, so that id generation takes no lock; empty until seeded or first used.
thread_local std::optional<std::mt19937_64> request_id_rng;
}  // namespace

void seedRequestIds(uint64_t seed) { request_id_rng.emplace(seed); }

void writeRequestId(std::span<char, kNewRequestIdBytes> out) {
  if (!request_id_rng) request_id_rng.emplace(config::streamSeed(0, config::SeedPurpose::kRequestId));
  std::mt19937_64& rng = *request_id_rng;
  // Two draws as 32 lowercase hex digits, high first (what "{:016x}{:016x}" printed, without fmt's parsing of
  // the format string on every request).
  // A byte at a time from a table of its two digits (a nibble at a time costs twice the steps).
  static constexpr std::array<char, 512> kHexPairs = [] {
    constexpr char kHex[] = "0123456789abcdef";
    std::array<char, 512> t{};
    for (size_t b = 0; b < 256; ++b) {
      t[2 * b] = kHex[b >> 4];
      t[2 * b + 1] = kHex[b & 0xf];
    }
    return t;
  }();
  for (size_t half = 0; half < 2; ++half) {
    const uint64_t value = rng();
    for (size_t i = 0; i < 8; ++i)
      std::memcpy(out.data() + half * 16 + 2 * i, &kHexPairs[2 * ((value >> (56 - 8 * i)) & 0xff)], 2);
  }
}

std::string newRequestId() {
  std::string id(kNewRequestIdBytes, '\0');
  writeRequestId(std::span<char, kNewRequestIdBytes>(id.data(), kNewRequestIdBytes));
  return id;
}

namespace {
constexpr size_t kMaxLoggedMessageBytes = 512;  // the request line's bound (request_log.cpp)

// A field's value as a std::string_view (Beast gives its own string_view type).
template <class Field>
std::string_view fieldValue(const Field& field) {
  const auto value = field.value();
  return {value.data(), value.size()};
}

// A client-given id is kept only when it is short and printable, so it is safe in logs and headers.
bool usableId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (char c : id)
    if (c <= ' ' || c > '~') return false;
  return true;
}
}  // namespace

void RequestOutcome::begin(const proxy::ClientHead& head) {
  begun_ = true;
  start_ = std::chrono::steady_clock::now();
  // The three fields read here, found in one pass over the head (each lookup by name was a walk of the fields'
  // ordered tree with case-insensitive comparisons): the first x-request-id, and how many traceparent and
  // tracestate fields there are, with the first of each.
  std::string_view given, traceparent, tracestate;
  int traceparents = 0, tracestates = 0;
  for (const auto& field : head) {
    const std::string_view name = field.name_string();
    if (name.size() == 12 && boost::beast::iequals(name, "x-request-id")) {
      if (given.data() == nullptr) given = fieldValue(field);
    } else if (name.size() == 11 && boost::beast::iequals(name, "traceparent")) {
      if (traceparents++ == 0) traceparent = fieldValue(field);
    } else if (name.size() == 10 && boost::beast::iequals(name, "tracestate")) {
      if (tracestates++ == 0) tracestate = fieldValue(field);
    }
  }
  if (usableId(given)) {
    given.copy(request_id_.data(), given.size());
    request_id_size_ = given.size();
  } else {
    writeRequestId(std::span<char, kNewRequestIdBytes>(request_id_.data(), kNewRequestIdBytes));
    request_id_size_ = kNewRequestIdBytes;
  }
  method_ = std::string(head.method_string());
  const std::string_view target = head.target();
  path_.assign(target.substr(0, target.find('?')));
  // W3C Trace Context: a request with more than one traceparent has none that can be trusted (a new trace starts);
  // several tracestate headers are one list, joined in their order.
  if (traceparents != 1) traceparent = {};
  if (sinks_.tracer) {
    // The log line names the request's trace, the client's or the one started here.
    std::string joined;
    if (tracestates > 1) {
      for (auto [it, end] = head.equal_range("tracestate"); it != end; ++it)
        joined.append(joined.empty() ? "" : ",").append(it->value());
    }
    trace_.emplace(*sinks_.tracer, traceparent, joined.empty() ? tracestate : std::string_view(joined));
    trace_id_ = std::string(trace_->traceId());
  } else {
    trace_id_ = std::string(util::traceIdFromTraceparent(traceparent));
  }
  sinks_.active_requests.fetch_add(1);
}

void RequestOutcome::setRequest(const openai::RequestView& request) {
  model_ = request.model;
  stream_ = request.stream;
  endpoint_ = request.endpoint;
}

void RequestOutcome::setDecision(const routing::Decision& decision, const proxy::RelayOutcome& relayed) {
  // What the decision learns from the response went to its ticket (the relay told it); this is the log and metrics.
  strategy_ = decision.strategy;
  pod_ = decision.pod ? decision.pod->name() : "";
  match_percent_ = decision.match_percent;
  status_ = relayed.status;
  first_byte_seconds_ = relayed.first_byte_seconds;
  retries_ = relayed.retries;
  stale_retries_ = relayed.stale_retries;
  output_tokens_ = relayed.output_tokens;
  engine_cached_tokens_ = relayed.cached_tokens;
  audit_ = relayed.audit;
  if (trace_) {
    prompt_tokens_ = relayed.prompt_tokens;
    response_id_ = relayed.response_id;
  }
  if (!relayed.error.empty()) {
    reason_ = relayed.error_reason;
    message_ = relayed.error;
  }
}

void RequestOutcome::setDisaggregation(std::string_view outcome, const routing::Decision* prefill,
                                       const proxy::PrefillLegOutcome* leg, double handoff_seconds) {
  pd_outcome_ = outcome;
  if (prefill && prefill->pod) {
    prefill_pod_ = prefill->pod->name();
    prefill_match_percent_ = prefill->match_percent;
  }
  if (leg) {
    prefill_seconds_ = leg->seconds;
    prefill_retries_ = leg->retries;
    prefill_audit_ = leg->audit;
  }
  handoff_seconds_ = handoff_seconds;
}

void RequestOutcome::fail(openai::GatewayError error, std::string message) {
  const openai::ErrorInfo& info = openai::errorInfo(error);
  status_ = info.status;
  reason_ = std::string(info.label);
  message_ = std::move(message);
}

void RequestOutcome::logIncompleteHead() const {
  if (log::format() == log::Format::kText) {
    log::write(log::Level::kInfo,
               fmt::format("request status={} reason={} error=\"{}\"", status_, reason_, openai::printable(message_)));
    return;
  }
  nlohmann::ordered_json record = log::record(log::Level::kInfo, "request");
  record["status"] = status_;
  if (!reason_.empty()) record["reason"] = reason_;
  if (!message_.empty()) record["error"] = message_.substr(0, kMaxLoggedMessageBytes);
  log::writeRecord(record);
}

RequestLogEntry RequestOutcome::logEntry(double seconds) const {
  RequestLogEntry entry;
  entry.id = requestId();
  entry.method = method_;
  entry.path = path_;
  entry.model = model_;
  entry.strategy = strategy_;
  entry.pod = pod_;
  entry.match_percent = match_percent_;
  entry.status = status_;
  entry.latency_seconds = seconds;
  entry.first_byte_seconds = first_byte_seconds_;
  entry.output_tokens = output_tokens_;
  entry.cached_tokens = engine_cached_tokens_;
  if (audit_) entry.predicted_cached_tokens = audit_->predicted_tokens;
  entry.slot_wait_seconds = slot_wait_seconds_;
  entry.pd_outcome = pd_outcome_;
  entry.prefill_pod = prefill_pod_;
  entry.prefill_match_percent = prefill_match_percent_;
  entry.prefill_seconds = prefill_seconds_;
  entry.handoff_seconds = handoff_seconds_;
  entry.prefill_retries = prefill_retries_;
  entry.transfer_note = transfer_note_;
  entry.key = key_;
  entry.stream = stream_;
  entry.retries = retries_;
  entry.stale_retries = stale_retries_;
  entry.reason = reason_;
  entry.message = message_;
  entry.trace_id = trace_id_;
  return entry;
}

RequestOutcome::~RequestOutcome() {
  if (!begun_) {
    if (status_ != 0 && log::enabled(log::Level::kInfo)) logIncompleteHead();
    return;
  }
  sinks_.active_requests.fetch_sub(1);
  if (trace_) endTrace();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Metric labels come only from bounded sets: a model label only for a model some pod serves (any other name a
  // client sends is "unknown", so made-up names cannot grow the series), strategies only from decisions (known
  // names), pods from discovery.
  static const std::string kUnknownModel = "unknown";
  const bool served = !pod_.empty() || (!model_.empty() && sinks_.pods.snapshot()->podsFor(model_) != nullptr);
  const std::string& model = model_.empty() ? model_ : (served ? model_ : kUnknownModel);
  sinks_.metrics.requestDone(model, pod_, status_, strategy_, seconds);
  if (first_byte_seconds_ >= 0) sinks_.metrics.firstByte(model, first_byte_seconds_);
  if (!reason_.empty() && !pod_.empty() && status_ >= 500) sinks_.metrics.upstreamError(pod_, reason_);
  if (retries_ > 0) sinks_.metrics.retried(reason_.empty() ? "recovered" : reason_);
  if (audit_)
    sinks_.metrics.predictionAudited(pod_, audit_->predicted_tokens, audit_->engine_cached_tokens,
                                         audit_->error_ratio);
  if (!pd_outcome_.empty()) sinks_.metrics.disaggregated(pd_outcome_, prefill_seconds_, handoff_seconds_);
  if (prefill_audit_)
    sinks_.metrics.predictionAudited(prefill_pod_, prefill_audit_->predicted_tokens,
                                     prefill_audit_->engine_cached_tokens, prefill_audit_->error_ratio);
  const log::Level level = status_ >= 500 && status_ != 499 ? log::Level::kWarn : log::Level::kInfo;
  if (!log::enabled(level)) return;
  const RequestLogEntry entry = logEntry(seconds);
  if (log::format() == log::Format::kJson) {
    nlohmann::ordered_json record = log::record(level, "request");
    addRequestLogFields(entry, record);
    log::writeRecord(record);
  } else {
    log::write(level, requestLogText(entry));
  }
}

namespace {
// OpenTelemetry's gen_ai.operation.name for an endpoint's requests; "" where the GenAI convention has none.
std::string_view genAiOperation(openai::Endpoint endpoint) {
  switch (endpoint) {
    case openai::Endpoint::kChatCompletions:
    case openai::Endpoint::kMessages:
    case openai::Endpoint::kResponses: return "chat";
    case openai::Endpoint::kCompletions: return "text_completion";
    case openai::Endpoint::kEmbeddings: return "embeddings";
    default: return "";
  }
}
}  // namespace

void RequestOutcome::endTrace() {
  if (!trace_->recording()) return trace_->finish();
  trace::Span& span = trace_->span();
  span.name = trace::httpSpanName(method_, path_);
  span.set("http.request.method", method_);
  span.set("url.path", openai::printable(path_, 256));
  span.set("http.response.status_code", static_cast<int64_t>(status_));
  span.set("prefixgate.request_id", requestId());
  if (!model_.empty()) span.set("gen_ai.request.model", model_);
  if (endpoint_) {
    if (std::string_view operation = genAiOperation(*endpoint_); !operation.empty())
      span.set("gen_ai.operation.name", operation);
    span.set("prefixgate.stream", stream_);
  }
  if (prompt_tokens_) span.set("gen_ai.usage.input_tokens", *prompt_tokens_);
  if (!pod_.empty()) span.set("gen_ai.usage.output_tokens", output_tokens_);
  if (!response_id_.empty()) span.set("gen_ai.response.id", response_id_);
  if (engine_cached_tokens_) span.set("prefixgate.cached_tokens", *engine_cached_tokens_);
  if (!strategy_.empty()) span.set("prefixgate.strategy", strategy_);
  if (!pod_.empty()) span.set("prefixgate.pod", pod_);
  if (match_percent_ >= 0) span.set("prefixgate.prefix_match_percent", match_percent_);
  if (retries_ > 0) span.set("prefixgate.retries", retries_);
  if (!key_.empty()) span.set("prefixgate.api_key", key_);
  if (!pd_outcome_.empty()) span.set("prefixgate.pd", pd_outcome_);
  if (!reason_.empty() && status_ >= 400) span.set("error.type", reason_);
  // A server span fails on 5xx only (HTTP convention: a 4xx is the client's error, not the server's).
  if (status_ >= 500) span.fail(openai::printable(message_, 512));
  trace_->finish();
}

}  // namespace prefixgate::server
