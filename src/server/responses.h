#pragma once
// Writing small complete responses (errors, JSON documents) on a client connection.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "openai/errors.h"

namespace prefixgate::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// How the client asked: the response uses its HTTP version (an HTTP/1.0 client keeps its connection only with
// `connection: keep-alive`), and a HEAD request gets the head (with the body's length) and no body.
struct Framing {
  unsigned version = 11;
  bool head_only = false;
  // The error body's shape: Anthropic's for the Messages API's paths (openai::ErrorShape).
  openai::ErrorShape error_shape = openai::ErrorShape::kOpenAI;
};

// Writes a response with a Content-Length body; returns false when the write failed.
boost::asio::awaitable<bool> writeResponse(boost::beast::tcp_stream& stream, int status, std::string_view content_type,
                                           std::string body, bool keep_alive, const HeaderList& headers = {},
                                           Framing framing = {});

// An error response of `error`'s kind, in framing.error_shape (OpenAI's unless the path is Anthropic's) (openai/errors.h), with `retry-after: 1` when the kind has
// one and `headers` do not set it.
boost::asio::awaitable<bool> writeError(boost::beast::tcp_stream& stream, openai::GatewayError error,
                                        std::string_view message, bool keep_alive, const HeaderList& headers = {},
                                        std::string_view param = {}, Framing framing = {});

}  // namespace prefixgate::server
