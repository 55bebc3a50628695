#pragma once
// Span names of bounded cardinality (OpenTelemetry's HTTP convention: "{method} {route}", or "{method}" alone when
// the route is unknown), and the GenAI operation an endpoint's request is. Pure.
#include <string>
#include <string_view>

namespace prefixgate::trace {

// "POST /v1/chat/completions"; a response id in the path becomes "{id}"; a path the gateway does not serve gives
// the method alone (a client's made-up paths never grow the set of names).
std::string httpSpanName(std::string_view method, std::string_view path);

}  // namespace prefixgate::trace
