#include "trace/tracer.h"

#include "trace/sampler.h"

namespace prefixgate::trace {

RequestTrace::RequestTrace(const Tracer& tracer, std::string_view traceparent, std::string_view tracestate)
    : tracer_(tracer) {
  const std::optional<util::TraceParent> parent = util::parseTraceparent(traceparent);
  if (parent) {
    span_.trace_id = parent->trace_id;
    span_.parent_span_id = parent->parent_id;
    span_.has_parent = true;
    flags_ = parent->flags;
    if (!tracestate.empty() && tracestate.size() <= kMaxTraceStateBytes) span_.trace_state = std::string(tracestate);
  } else {
    span_.trace_id = newTraceId();
  }
  sampled_ = shouldSample(parent, traceId(), tracer.sampleRatio());
  flags_ = sampled_ ? flags_ | util::TraceParent::kSampled : flags_ & ~util::TraceParent::kSampled;
  span_.span_id = newSpanId();
  span_.kind = SpanKind::kServer;
  if (sampled_) span_.start_time_unix_nano = nowUnixNano();
}

RequestTrace::~RequestTrace() { finish(); }

Span RequestTrace::startChild(std::string_view name, SpanKind kind) const {
  Span child;
  child.span_id = newSpanId();
  if (!sampled_) return child;
  child.trace_id = span_.trace_id;
  child.parent_span_id = span_.span_id;
  child.has_parent = true;
  child.trace_state = span_.trace_state;
  child.name = std::string(name);
  child.kind = kind;
  child.start_time_unix_nano = nowUnixNano();
  return child;
}

void RequestTrace::end(Span&& child) const {
  if (!sampled_) return;
  child.end_time_unix_nano = nowUnixNano();
  tracer_.submit(std::move(child));
}

Propagation RequestTrace::propagation(const Span& attempt) const {
  return {util::formatTraceparent(traceId(), view(attempt.span_id), flags_), span_.trace_state};
}

void RequestTrace::firstToken() {
  if (!sampled_ || first_token_) return;
  first_token_ = true;
  const uint64_t now = nowUnixNano();
  SpanEvent event{"first_token", now, {}};
  event.attributes.push_back({"prefixgate.time_to_first_token_ms",
                              static_cast<double>(now - span_.start_time_unix_nano) / 1e6});
  span_.events.push_back(std::move(event));
}

void RequestTrace::finish() {
  if (finished_) return;
  finished_ = true;
  if (!sampled_) return;
  span_.end_time_unix_nano = nowUnixNano();
  tracer_.submit(std::move(span_));
}

}  // namespace prefixgate::trace
