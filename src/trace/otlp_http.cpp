// postJson (trace/exporter.h): the exporter's one HTTP exchange, on its own io_context, so the exporter thread
// shares nothing with the event loops. The exchange itself is net::httpRequest's.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "net/http_get.h"
#include "trace/exporter.h"

namespace prefixgate::trace {
namespace asio = boost::asio;

namespace {
constexpr size_t kMaxAnswerBytes = 64 * 1024;  // a collector's answer is a small (partial) success or a Status
using Clock = std::chrono::steady_clock;
}  // namespace

bool postJson(const OtlpEndpoint& endpoint, const std::string& body, std::chrono::milliseconds timeout,
              std::string& error) {
  asio::io_context io(1);
  net::GetResult result;
  bool done = false;
  const auto deadline = Clock::now() + timeout;
  asio::co_spawn(io,
                 net::httpRequest(boost::beast::http::verb::post, endpoint.host, endpoint.port, endpoint.target, body,
                                  "application/json", timeout, kMaxAnswerBytes),
                 [&](std::exception_ptr, net::GetResult r) {
                   result = std::move(r);
                   done = true;
                 });
  // The stream's deadline bounds the exchange; this bounds a name's resolution too. What is left when it passes is
  // destroyed with the io_context.
  io.run_until(deadline + std::chrono::milliseconds(50));
  if (!done || result.timed_out) {
    error = "no answer within tracing.export_timeout_ms";
    return false;
  }
  if (result.status == 0) {
    error = result.error.empty() ? "no answer" : result.error;
    return false;
  }
  if (result.status / 100 != 2) error = "the collector answered " + std::to_string(result.status);
  return result.status / 100 == 2;
}

}  // namespace prefixgate::trace
