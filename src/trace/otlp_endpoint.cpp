#include "trace/otlp_endpoint.h"

#include <charconv>

namespace prefixgate::trace {

bool parseOtlpEndpoint(std::string_view url, OtlpEndpoint& out, std::string& error) {
  constexpr std::string_view kHttp = "http://";
  if (url.starts_with("https://")) {
    error = "https is not supported (the exporter has no TLS client): send to an http:// collector, e.g. a local "
            "OpenTelemetry Collector that forwards over TLS";
    return false;
  }
  if (!url.starts_with(kHttp)) {
    error = "expected http://HOST:PORT/PATH, got '" + std::string(url) + "'";
    return false;
  }
  std::string_view rest = url.substr(kHttp.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  out = OtlpEndpoint{};
  if (slash != std::string_view::npos && slash + 1 < rest.size()) out.target = std::string(rest.substr(slash));
  std::string_view port_text;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      error = "unclosed '[' in the host of '" + std::string(url) + "'";
      return false;
    }
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        error = "expected ':PORT' after the host in '" + std::string(url) + "'";
        return false;
      }
      port_text = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port_text = authority.substr(colon + 1);
  }
  if (out.host.empty()) {
    error = "no host in '" + std::string(url) + "'";
    return false;
  }
  for (char c : out.host)
    if (static_cast<unsigned char>(c) <= ' ' || c == '@' || c == '/') {
      error = "invalid host in '" + std::string(url) + "'";
      return false;
    }
  if (!port_text.empty() || authority.ends_with(':')) {
    unsigned port = 0;
    auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 || port > 65535) {
      error = "invalid port in '" + std::string(url) + "'";
      return false;
    }
    out.port = static_cast<uint16_t>(port);
  }
  return true;
}

}  // namespace prefixgate::trace
