#pragma once
// Writing small complete responses (errors, JSON documents) on a client connection.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prefixgate::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// Writes a response with a Content-Length body; returns false when the write failed.
boost::asio::awaitable<bool> writeResponse(boost::beast::tcp_stream& stream, int status, std::string_view content_type,
                                           std::string body, bool keep_alive, const HeaderList& headers = {});

// An OpenAI-shaped error response.
boost::asio::awaitable<bool> writeError(boost::beast::tcp_stream& stream, int status, std::string_view message,
                                        bool keep_alive, const HeaderList& headers = {}, std::string_view param = {});

}  // namespace prefixgate::server
