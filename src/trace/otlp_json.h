#pragma once
// OTLP/HTTP's JSON encoding of an ExportTraceServiceRequest (opentelemetry-proto docs/specification.md, "JSON
// Protobuf Encoding"): proto3's JSON mapping with lowerCamelCase keys, trace and span ids as hex strings (not
// base64), enums as integers, 64-bit integers (times, intValue) as decimal strings. Pure.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trace/span.h"

namespace prefixgate::trace {

// The resource every span of this process belongs to.
struct Resource {
  std::string service_name = "prefixgate";  // service.name
  std::string service_instance_id;          // service.instance.id ("" = left out)
  std::string service_version;              // service.version ("" = left out)
};

// The instrumentation scope's name in every request (scopeSpans[].scope.name).
inline constexpr std::string_view kScopeName = "prefixgate";

// One request body: {"resourceSpans":[{"resource":{...},"scopeSpans":[{"scope":{...},"spans":[...]}]}]}.
std::string encodeExportRequest(const Resource& resource, std::span<const Span> spans);

}  // namespace prefixgate::trace
