#pragma once
// tracing.otlp_endpoint: where the exporter POSTs its batches. Plain HTTP only: the exporter has no TLS client
// (an https collector is reached through a local OpenTelemetry Collector). Pure.
#include <cstdint>
#include <string>
#include <string_view>

namespace prefixgate::trace {

struct OtlpEndpoint {
  std::string host;  // a name or an IP literal (IPv6 without its brackets)
  uint16_t port = 80;
  std::string target = "/v1/traces";  // the path (and query) the request names
};

// Parses "http://HOST[:PORT][/PATH]" (an IPv6 host in brackets); no path means /v1/traces, OTLP/HTTP's path for
// traces. False with `error` saying why (https is refused, naming the reason).
bool parseOtlpEndpoint(std::string_view url, OtlpEndpoint& out, std::string& error);

}  // namespace prefixgate::trace
