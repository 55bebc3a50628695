#include "server/responses.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>

#include "openai/errors.h"

namespace prefixgate::server {
namespace asio = boost::asio;
namespace http = boost::beast::http;

asio::awaitable<bool> writeResponse(boost::beast::tcp_stream& stream, int status, std::string_view content_type,
                                    std::string body, bool keep_alive, const HeaderList& headers) {
  http::response<http::string_body> res{static_cast<http::status>(status), 11};
  res.set(http::field::server, "prefixgate");
  res.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) res.set(name, value);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  boost::system::error_code ec;
  co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
  co_return !ec;
}

asio::awaitable<bool> writeError(boost::beast::tcp_stream& stream, int status, std::string_view message, bool keep_alive,
                                 const HeaderList& headers, std::string_view param) {
  co_return co_await writeResponse(stream, status, "application/json", openai::errorBody(status, message, param),
                                   keep_alive, headers);
}

}  // namespace prefixgate::server
