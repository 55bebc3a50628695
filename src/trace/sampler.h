#pragma once
// Parent-based sampling by ratio (OpenTelemetry's ParentBased(TraceIdRatioBased)): a caller's sampled flag is
// obeyed; a trace the gateway starts is sampled when its trace id falls under the ratio, so every replica (and any
// other service using the same rule) decides the same for the same trace. Pure.
#include <optional>
#include <string_view>

#include "util/traceparent.h"

namespace prefixgate::trace {

// Whether a trace with `trace_id` (32 hex digits) is sampled at `ratio` (0..1): the trace id's last 8 bytes, read
// big-endian and shifted right once, below ratio x 2^63 (as OpenTelemetry's TraceIdRatioBased samplers do).
bool sampledByRatio(std::string_view trace_id, double ratio);

// The decision for a request: the parent's flag when the client sent a valid traceparent, else the ratio on
// `trace_id` (the trace the gateway starts).
bool shouldSample(const std::optional<util::TraceParent>& parent, std::string_view trace_id, double ratio);

}  // namespace prefixgate::trace
