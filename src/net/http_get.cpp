#include "net/http_get.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "net/drained_reads.h"

namespace prefixgate::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

asio::awaitable<GetResult> httpGet(std::string host, uint16_t port, std::string target,
                                   std::chrono::milliseconds timeout, size_t max_body_bytes) {
  co_return co_await httpRequest(http::verb::get, std::move(host), port, std::move(target), {}, {}, timeout,
                                 max_body_bytes);
}

asio::awaitable<GetResult> httpRequest(http::verb method, std::string host, uint16_t port, std::string target,
                                       std::string body, std::string_view content_type,
                                       std::chrono::milliseconds timeout, size_t max_body_bytes) {
  GetResult result;
  boost::system::error_code ec;
  auto executor = co_await asio::this_coro::executor;
  beast::tcp_stream stream(executor);
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    // Names other than IP literals are resolved (rare: discovery gives IPs).
    asio::ip::tcp::resolver resolver(executor);
    auto results = co_await resolver.async_resolve(host, std::to_string(port), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || results.empty()) {
      result.error = "cannot resolve " + host;
      co_return result;
    }
    address = results.begin()->endpoint().address();
  }
  stream.expires_after(timeout);
  co_await stream.async_connect(asio::ip::tcp::endpoint(address, port), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "connect: " + ec.message();
    result.timed_out = ec == beast::error::timeout;
    co_return result;
  }
  drained_reads::enable(stream.socket().native_handle());
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, host + ":" + std::to_string(port));
  req.set(http::field::user_agent, "prefixgate");
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  req.keep_alive(false);
  if (!body.empty()) {
    req.body() = std::move(body);
    req.prepare_payload();
  }
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "write: " + ec.message();
    result.timed_out = ec == beast::error::timeout;
    co_return result;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_body_bytes);
  co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "read: " + ec.message();
    result.timed_out = ec == beast::error::timeout;
    co_return result;
  }
  result.status = static_cast<int>(parser.get().result_int());
  result.body = std::move(parser.get().body());
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  co_return result;
}

}  // namespace prefixgate::net
