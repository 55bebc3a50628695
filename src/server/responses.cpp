#include "server/responses.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

namespace prefixgate::server {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

asio::awaitable<bool> writeResponse(beast::tcp_stream& stream, int status, std::string_view content_type,
                                    std::string body, bool keep_alive, const HeaderList& headers, Framing framing) {
  http::response<http::string_body> res{static_cast<http::status>(status), framing.version == 10 ? 10u : 11u};
  res.set(http::field::server, "prefixgate");
  res.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) res.set(name, value);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  boost::system::error_code ec;
  if (framing.head_only) {
    http::response_serializer<http::string_body> serializer{res};
    co_await http::async_write_header(stream, serializer, asio::redirect_error(asio::use_awaitable, ec));
  } else {
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return !ec;
}

asio::awaitable<bool> writeError(beast::tcp_stream& stream, openai::GatewayError error, std::string_view message,
                                 bool keep_alive, const HeaderList& headers, std::string_view param, Framing framing) {
  const openai::ErrorInfo& info = openai::errorInfo(error);
  const auto request_id = std::find_if(headers.begin(), headers.end(),
                                       [](const auto& h) { return beast::iequals(h.first, "request-id"); });
  std::string body = openai::errorBody(error, message, param, framing.error_shape,
                                       request_id == headers.end() ? std::string_view() : request_id->second);
  const bool has_retry_after = std::any_of(headers.begin(), headers.end(),
                                           [](const auto& h) { return beast::iequals(h.first, "retry-after"); });
  if (info.retry_after && !has_retry_after) {
    HeaderList with = headers;
    with.emplace_back("retry-after", "1");
    co_return co_await writeResponse(stream, info.status, "application/json", std::move(body), keep_alive, with,
                                     framing);
  }
  co_return co_await writeResponse(stream, info.status, "application/json", std::move(body), keep_alive, headers,
                                   framing);
}

}  // namespace prefixgate::server
