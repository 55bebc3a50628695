#include "net/http_get.h"

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <optional>

#include "net/drained_reads.h"

namespace prefixgate::net {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {
using Deadline = std::chrono::steady_clock::time_point;

// Opens `stream` to host:port (a name other than an IP literal is resolved: rare, discovery gives IPs) by
// `deadline`; false with `result`'s error set when it cannot.
asio::awaitable<bool> open(beast::tcp_stream& stream, const std::string& host, uint16_t port, Deadline deadline,
                           GetResult& result) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(host, ec);
  if (ec) {
    asio::ip::tcp::resolver resolver(stream.get_executor());
    auto results = co_await resolver.async_resolve(host, std::to_string(port), asio::redirect_error(asio::use_awaitable, ec));
    if (ec || results.empty()) {
      result.error = "cannot resolve " + host;
      co_return false;
    }
    address = results.begin()->endpoint().address();
  }
  stream.expires_at(deadline);
  co_await stream.async_connect(asio::ip::tcp::endpoint(address, port), asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "connect: " + ec.message();
    result.timed_out = ec == beast::error::timeout;
    co_return false;
  }
  drained_reads::enable(stream.socket().native_handle());
  co_return true;
}

// How one exchange on an open connection ended.
struct Exchanged {
  bool answered = false;    // a response came whole (result's status and body set)
  bool heard = false;       // the server sent anything at all (false: it may never have seen the request)
  bool keep_alive = false;  // the response leaves the connection open for another request
};

// Writes `req` and reads its response into `result` by `deadline`.
asio::awaitable<Exchanged> exchange(beast::tcp_stream& stream, const http::request<http::string_body>& req,
                                    Deadline deadline, size_t max_body_bytes, GetResult& result) {
  Exchanged out;
  boost::system::error_code ec;
  stream.expires_at(deadline);
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "write: " + ec.message();
    result.timed_out = ec == beast::error::timeout;
    co_return out;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_body_bytes);
  co_await http::async_read(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  out.heard = parser.got_some() || buffer.size() > 0;
  if (ec) {
    result.error = "read: " + ec.message();
    result.timed_out = ec == beast::error::timeout;
    co_return out;
  }
  out.answered = true;
  out.keep_alive = parser.keep_alive();
  result.status = static_cast<int>(parser.get().result_int());
  result.body = std::move(parser.get().body());
  co_return out;
}

http::request<http::string_body> makeRequest(http::verb method, const std::string& host, uint16_t port,
                                             std::string target, bool keep_alive) {
  http::request<http::string_body> req{method, std::move(target), 11};
  req.set(http::field::host, host + ":" + std::to_string(port));
  req.set(http::field::user_agent, "prefixgate");
  req.keep_alive(keep_alive);
  return req;
}
}  // namespace

bool idleSocketOpen(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

asio::awaitable<GetResult> httpGet(std::string host, uint16_t port, std::string target,
                                   std::chrono::milliseconds timeout, size_t max_body_bytes) {
  co_return co_await httpRequest(http::verb::get, std::move(host), port, std::move(target), {}, {}, timeout,
                                 max_body_bytes);
}

asio::awaitable<GetResult> httpRequest(http::verb method, std::string host, uint16_t port, std::string target,
                                       std::string body, std::string_view content_type,
                                       std::chrono::milliseconds timeout, size_t max_body_bytes) {
  GetResult result;
  const Deadline deadline = std::chrono::steady_clock::now() + timeout;
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  if (!co_await open(stream, host, port, deadline, result)) co_return result;
  http::request<http::string_body> req = makeRequest(method, host, port, std::move(target), false);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  if (!body.empty()) {
    req.body() = std::move(body);
    req.prepare_payload();
  }
  co_await exchange(stream, req, deadline, max_body_bytes, result);
  boost::system::error_code ec;
  stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
  co_return result;
}

struct KeptConnection::State {
  std::optional<beast::tcp_stream> stream;
  std::string host;
  uint16_t port = 0;
};

KeptConnection::KeptConnection() : state_(std::make_unique<State>()) {}
KeptConnection::~KeptConnection() = default;

asio::awaitable<GetResult> KeptConnection::get(std::string host, uint16_t port, std::string target,
                                               std::chrono::milliseconds timeout, size_t max_body_bytes) {
  State& s = *state_;
  const Deadline deadline = std::chrono::steady_clock::now() + timeout;
  // An open connection to the same server that it has not closed meanwhile (nor written to unasked) is reused.
  if (s.stream && (s.host != host || s.port != port || !s.stream->socket().is_open() ||
                   !idleSocketOpen(s.stream->socket().native_handle())))
    s.stream.reset();
  const http::request<http::string_body> req = makeRequest(http::verb::get, host, port, std::move(target), true);
  for (;;) {
    GetResult result;
    const bool reused = s.stream.has_value();
    if (reused) {
      ++reuses_;
    } else {
      s.stream.emplace(co_await asio::this_coro::executor);
      s.host = host;
      s.port = port;
      ++connects_;
      if (!co_await open(*s.stream, host, port, deadline, result)) {
        s.stream.reset();
        co_return result;
      }
    }
    const Exchanged done = co_await exchange(*s.stream, req, deadline, max_body_bytes, result);
    if (done.answered && done.keep_alive) {
      s.stream->expires_never();
      co_return result;
    }
    s.stream.reset();
    // The server closed a reused connection as the request went out: once more on a fresh one, in the time left.
    if (!done.answered && reused && !done.heard && !result.timed_out &&
        std::chrono::steady_clock::now() < deadline)
      continue;
    co_return result;
  }
}

}  // namespace prefixgate::net
