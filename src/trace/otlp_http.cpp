// postJson (trace/exporter.h): the exporter's one HTTP exchange, on its own io_context, so the exporter thread
// shares nothing with the event loops. The Beast templates it needs stay in this file.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "trace/exporter.h"

namespace prefixgate::trace {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr size_t kMaxAnswerBytes = 64 * 1024;  // a collector's answer is a small (partial) success or a Status
constexpr auto kAwait = asio::use_awaitable;
using Clock = std::chrono::steady_clock;

asio::awaitable<void> post(const OtlpEndpoint& endpoint, const std::string& body, Clock::time_point deadline,
                           int& status, std::string& error) {
  auto executor = co_await asio::this_coro::executor;
  error_code ec;
  asio::ip::address address = asio::ip::make_address(endpoint.host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(executor);
    auto results = co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port),
                                                   asio::redirect_error(kAwait, ec));
    if (ec || results.empty()) {
      error = "cannot resolve " + endpoint.host + (ec ? ": " + ec.message() : "");
      co_return;
    }
    address = results.begin()->endpoint().address();
  }
  beast::tcp_stream stream(executor);
  stream.expires_at(deadline);
  co_await stream.async_connect(asio::ip::tcp::endpoint(address, endpoint.port), asio::redirect_error(kAwait, ec));
  if (ec) {
    error = "connect: " + ec.message();
    co_return;
  }
  http::request<http::string_body> request{http::verb::post, endpoint.target, 11};
  request.set(http::field::host, endpoint.host + ":" + std::to_string(endpoint.port));
  request.set(http::field::user_agent, "prefixgate");
  request.set(http::field::content_type, "application/json");
  request.keep_alive(false);
  request.body() = body;
  request.prepare_payload();
  co_await http::async_write(stream, request, asio::redirect_error(kAwait, ec));
  if (ec) {
    error = "write: " + ec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxAnswerBytes);
  co_await http::async_read(stream, buffer, parser, asio::redirect_error(kAwait, ec));
  if (ec) {
    error = ec == beast::error::timeout ? "no answer within tracing.export_timeout_ms" : "read: " + ec.message();
    co_return;
  }
  status = static_cast<int>(parser.get().result_int());
  if (status / 100 != 2) error = "the collector answered " + std::to_string(status);
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
}

}  // namespace

bool postJson(const OtlpEndpoint& endpoint, const std::string& body, std::chrono::milliseconds timeout,
              std::string& error) {
  asio::io_context io(1);
  int status = 0;
  bool done = false;
  const auto deadline = Clock::now() + timeout;
  asio::co_spawn(io, post(endpoint, body, deadline, status, error), [&done](std::exception_ptr) { done = true; });
  // The stream's deadline bounds the exchange; this bounds a name's resolution too. What is left when it passes is
  // destroyed with the io_context.
  io.run_until(deadline + std::chrono::milliseconds(50));
  if (!done) {
    error = "no answer within tracing.export_timeout_ms";
    return false;
  }
  if (status == 0 && error.empty()) error = "no answer";
  return status / 100 == 2;
}

}  // namespace prefixgate::trace
