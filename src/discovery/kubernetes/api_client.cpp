#include "discovery/kubernetes/api_client.h"

// Asio's OpenSSL implementation, compiled here once (the rest of Asio is in util/asio_impl.cpp).
#include <boost/asio/ssl/impl/src.hpp>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <array>

#include "net/drained_reads.h"

namespace prefixgate::discovery::kubernetes {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;

namespace {

constexpr size_t kReadChunkBytes = 16 << 10;
// A watch line is one EndpointSlice (at most 1,000 endpoints): far below this.
constexpr size_t kMaxLineBytes = 16 << 20;

// Hands complete lines to the sink, or collects the body when there is none.
bool consume(ApiRequest& request, ApiResult& result, std::string_view data) {
  result.body.append(data);
  if (!request.on_line) {
    if (result.body.size() <= request.max_body_bytes) return true;
    result.error = "response body over " + std::to_string(request.max_body_bytes) + " bytes";
    return false;
  }
  size_t start = 0;
  for (size_t nl; (nl = result.body.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string_view line(result.body.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty() && !request.on_line(line)) {
      result.error = "stopped";
      return false;
    }
  }
  result.body.erase(0, start);
  if (result.body.size() <= kMaxLineBytes) return true;
  result.error = "watch line over " + std::to_string(kMaxLineBytes) + " bytes";
  return false;
}

// Writes the request and reads the response through `stream` (plain or TLS), body by pieces (Beast's buffer_body),
// so a watch is handled as it arrives (read_some: each event as soon as its bytes are in).
template <class Stream>
asio::awaitable<void> exchange(Stream& stream, const ApiServer& server, ApiRequest& request, ApiResult& result) {
  boost::system::error_code ec;
  http::request<http::empty_body> req{http::verb::get, request.target, 11};
  const bool v6 = server.host.find(':') != std::string::npos;
  req.set(http::field::host, (v6 ? "[" + server.host + "]" : server.host) + ":" + std::to_string(server.port));
  req.set(http::field::user_agent, "prefixgate");
  req.set(http::field::accept, "application/json");
  if (!request.token.empty()) req.set(http::field::authorization, "Bearer " + request.token);
  req.keep_alive(false);
  co_await http::async_write(stream, req, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "write: " + ec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // consume() bounds what is kept
  co_await http::async_read_header(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "read: " + ec.message();
    co_return;
  }
  result.status = static_cast<int>(parser.get().result_int());
  if (result.status != 200) request.on_line = nullptr;  // an error body is one Status object: keep it whole
  std::array<char, kReadChunkBytes> chunk;
  while (!parser.is_done()) {
    parser.get().body().data = chunk.data();
    parser.get().body().size = chunk.size();
    co_await http::async_read_some(stream, buffer, parser, asio::redirect_error(asio::use_awaitable, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      result.error = "read: " + ec.message();
      co_return;
    }
    if (!consume(request, result, std::string_view(chunk.data(), chunk.size() - parser.get().body().size)))
      co_return;
  }
}

}  // namespace

asio::awaitable<ApiResult> apiGet(const ApiServer& server, ApiRequest request) {
  ApiResult result;
  if (request.max_body_bytes == 0) request.max_body_bytes = kMaxLineBytes;
  boost::system::error_code ec;
  auto executor = co_await asio::this_coro::executor;
  asio::ip::tcp::resolver resolver(executor);
  auto endpoints = co_await resolver.async_resolve(server.host, std::to_string(server.port),
                                                   asio::redirect_error(asio::use_awaitable, ec));
  if (ec || endpoints.empty()) {
    result.error = "cannot resolve " + server.host + ": " + ec.message();
    co_return result;
  }
  beast::tcp_stream tcp(executor);
  tcp.expires_after(request.timeout);
  co_await tcp.async_connect(endpoints, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "connect: " + ec.message();
    co_return result;
  }
  net::drained_reads::enable(tcp.socket().native_handle());
  if (!server.tls) {
    co_await exchange(tcp, server, request, result);
    co_return result;
  }
  ssl::context context(ssl::context::tls_client);
  context.set_verify_mode(ssl::verify_peer);
  context.load_verify_file(request.ca_file, ec);
  if (ec) {
    result.error = "ca_file " + request.ca_file + ": " + ec.message();
    co_return result;
  }
  beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp), context);
  // SNI names a host, never an address (RFC 6066); the certificate is checked against either.
  asio::ip::make_address(server.host, ec);
  if (ec && !SSL_set_tlsext_host_name(stream.native_handle(), server.host.c_str())) {
    result.error = "cannot set the TLS server name";
    co_return result;
  }
  stream.set_verify_callback(ssl::host_name_verification(server.host));
  co_await stream.async_handshake(ssl::stream_base::client, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    result.error = "TLS handshake: " + ec.message();
    co_return result;
  }
  co_await exchange(stream, server, request, result);
  co_return result;
}

}  // namespace prefixgate::discovery::kubernetes
