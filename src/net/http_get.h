#pragma once
// A one-shot HTTP/1.1 GET on a fresh connection, for background tasks (health checks, metrics scraping).
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <string>

namespace prefixgate::net {

struct GetResult {
  int status = 0;     // 0 when no response arrived
  std::string error;  // why, when status is 0
  std::string body;
};

// Never throws; the whole exchange (connect included) must finish within `timeout`.
boost::asio::awaitable<GetResult> httpGet(std::string host, uint16_t port, std::string target,
                                          std::chrono::milliseconds timeout, size_t max_body_bytes = 8 << 20);

}  // namespace prefixgate::net
