#pragma once
// A one-shot HTTP/1.1 GET on a fresh connection, for background tasks (health checks, metrics scraping).
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <string>
#include <string_view>

namespace prefixgate::net {

struct GetResult {
  int status = 0;     // 0 when no response arrived
  std::string error;  // why, when status is 0
  bool timed_out = false;  // the exchange ran past its timeout (error says at which step)
  std::string body;
};

// One request with a body (`content_type`; an empty body is sent as none), as httpGet; the tracing exporter's POST.
boost::asio::awaitable<GetResult> httpRequest(boost::beast::http::verb method, std::string host, uint16_t port,
                                              std::string target, std::string body, std::string_view content_type,
                                              std::chrono::milliseconds timeout, size_t max_body_bytes);

// Never throws; the whole exchange (connect included) must finish within `timeout`.
boost::asio::awaitable<GetResult> httpGet(std::string host, uint16_t port, std::string target,
                                          std::chrono::milliseconds timeout, size_t max_body_bytes = 8 << 20);

}  // namespace prefixgate::net
