#pragma once
// One GET to the Kubernetes API server over HTTP or HTTPS (OpenSSL, the server verified against the CA file and
// its host name), with the service account's bearer token. The only translation unit with TLS code in it.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "discovery/kubernetes/watch_protocol.h"

namespace prefixgate::discovery::kubernetes {

struct ApiResult {
  int status = 0;         // 0 when no response header arrived
  std::string error;      // why the exchange failed (empty when the body ended normally)
  std::string body;       // the whole body when no line sink was given (else what followed the last newline)
};

// Called with each complete line of the body; returning false ends the exchange (error "stopped").
using LineSink = std::function<bool(std::string_view line)>;

struct ApiRequest {
  std::string target;
  std::string token;    // empty = no authorization header
  std::string ca_file;  // https only
  std::chrono::milliseconds timeout{0};  // the whole exchange, connect included
  size_t max_body_bytes = 0;             // a longer body (without a sink) fails the exchange; 0 = 16 MiB
  LineSink on_line{};                 // set: stream the body line by line (a watch)
};

// Never throws. A body cut short (the connection dropped mid-stream) sets `error`.
boost::asio::awaitable<ApiResult> apiGet(const ApiServer& server, ApiRequest request);

}  // namespace prefixgate::discovery::kubernetes
