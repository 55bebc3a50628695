#include "proxy/head_text.h"

#include "proxy/head_scan.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>

namespace prefixgate::proxy {

bool isHopByHop(std::string_view name) { return isHopByHop(boost::beast::http::string_to_field(name)); }

bool namedByConnection(std::string_view connection_tokens, std::string_view name) {
  return !connection_tokens.empty() && boost::beast::http::token_list(connection_tokens).exists(name);
}

bool namesOtherFields(std::string_view connection_tokens) {
  if (connection_tokens.empty()) return false;
  // What nearly every client and engine sends, one token: no list to walk.
  if (connection_tokens.size() == 10 && nameEqualsLower(connection_tokens, "keep-alive")) return false;
  if (boost::beast::iequals(connection_tokens, "close")) return false;
  for (const auto token : boost::beast::http::token_list(connection_tokens)) {
    const std::string_view name(token.data(), token.size());
    if (!boost::beast::iequals(name, "close") && !isHopByHop(name)) return true;
  }
  return false;
}

}  // namespace prefixgate::proxy
