#include "proxy/head_text.h"

#include <array>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

namespace prefixgate::proxy {

bool isHopByHop(std::string_view name) {
  static constexpr std::array<std::string_view, 9> kHopByHop = {
      "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect",
      "proxy-authorization"};
  for (std::string_view h : kHopByHop)
    if (boost::beast::iequals(name, h)) return true;
  return false;
}

bool namedByConnection(std::string_view connection_tokens, std::string_view name) {
  return !connection_tokens.empty() && boost::beast::http::token_list(connection_tokens).exists(name);
}

}  // namespace prefixgate::proxy
