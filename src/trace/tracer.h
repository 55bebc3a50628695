#pragma once
// Tracing's request side (docs/configuration.md, "Tracing"): a Tracer holds the sampling ratio and where finished
// spans go; a RequestTrace is one request's trace context (continued from the client's traceparent or started
// here), its server span, and the children it makes (tokenize, route, upstream attempts). Built only when
// tracing.otlp_endpoint is set: with tracing off the request path holds none of this.
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "trace/ids.h"
#include "trace/span.h"
#include "util/traceparent.h"

namespace prefixgate::trace {

class Tracer {
 public:
  // Receives each finished, sampled span; called from any thread, must not block (OtlpExporter::submit).
  using Sink = std::function<void(Span&&)>;
  Tracer(double sample_ratio, Sink sink) : sample_ratio_(sample_ratio), sink_(std::move(sink)) {}
  double sampleRatio() const { return sample_ratio_; }
  void submit(Span&& span) const { sink_(std::move(span)); }

 private:
  double sample_ratio_;
  Sink sink_;
};

// The W3C tracestate a trace passes on is bounded (the specification's 512 characters): a longer one is dropped.
inline constexpr size_t kMaxTraceStateBytes = 512;

// What an upstream attempt sends the engine in place of the client's trace headers.
struct Propagation {
  util::TraceparentText traceparent;  // this trace, the attempt's span as parent, the request's flags
  std::string_view tracestate;        // the client's ("" = none sent)
};

class RequestTrace {
 public:
  // The client's headers ("" when absent): a valid traceparent is continued (its sampled flag decides), anything
  // else starts a new trace sampled by the tracer's ratio on its id. The request's span starts now. `tracestate` is
  // kept only with a valid traceparent (W3C: it means nothing without one).
  RequestTrace(const Tracer& tracer, std::string_view traceparent, std::string_view tracestate);
  RequestTrace(const RequestTrace&) = delete;
  RequestTrace& operator=(const RequestTrace&) = delete;
  ~RequestTrace();  // finish()

  bool recording() const { return sampled_; }
  std::string_view traceId() const { return view(span_.trace_id); }
  std::string_view traceState() const { return span_.trace_state; }
  uint8_t flags() const { return flags_; }

  // The request's own span (kind server, a child of the client's span or a root): its name and attributes are
  // filled as the request learns them. Sent at finish().
  Span& span() { return span_; }
  // A child of the request's span, started now, with a fresh span id (set even when not recording: an attempt
  // names it to the engine). Nothing else is filled when not recording.
  Span startChild(std::string_view name, SpanKind kind) const;
  // Ends `child` now and hands it to the tracer when recording.
  void end(Span&& child) const;
  // The headers an attempt whose span is `attempt` sends the engine.
  Propagation propagation(const Span& attempt) const;
  // The first body bytes of the response (a stream's first token): an event on the request's span, once.
  void firstToken();
  // Ends the request's span and sends it (when recording); later calls do nothing.
  void finish();

 private:
  const Tracer& tracer_;
  Span span_;
  uint8_t flags_ = 0;
  bool sampled_ = false;
  bool first_token_ = false;
  bool finished_ = false;
};

}  // namespace prefixgate::trace
