#pragma once
// HTTP/1.1 heads written as text into a buffer the connection reuses: one contiguous block per head (sent with the
// first body bytes in one gathered write) instead of Beast's serializer, which allocates a field per header and
// hands the kernel an iovec per token.
#include <boost/beast/http/field.hpp>
#include <string>
#include <string_view>

namespace prefixgate::proxy {

// True for headers that describe one connection and must not be forwarded (RFC 9110 7.6.1).
bool isHopByHop(std::string_view name);
// True when `name` is listed in a Connection header's value (those headers are hop-by-hop too).
bool namedByConnection(std::string_view connection_tokens, std::string_view name);

inline void appendField(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ").append(value).append("\r\n");
}

// Appends the end-to-end fields of `fields` (a Beast header), leaving out the hop-by-hop ones, those its
// Connection header names, Content-Length (the writer frames the body itself) and those `skip(field)` rejects
// (fields the writer sets itself).
template <class Fields, class Skip>
void appendEndToEndFields(std::string& out, const Fields& fields, Skip skip) {
  const std::string_view connection_tokens = fields[boost::beast::http::field::connection];
  for (const auto& field : fields) {
    const std::string_view name = field.name_string();
    if (field.name() == boost::beast::http::field::content_length || isHopByHop(name) || skip(field)) continue;
    if (namedByConnection(connection_tokens, name)) continue;
    appendField(out, name, field.value());
  }
}

}  // namespace prefixgate::proxy
