#pragma once
// HTTP/1.1 heads written as text into a buffer the connection reuses: one contiguous block per head (sent with the
// first body bytes in one gathered write) instead of Beast's serializer, which allocates a field per header and
// hands the kernel an iovec per token.
#include <boost/beast/http/field.hpp>
#include <cstring>
#include <string>
#include <string_view>

namespace prefixgate::proxy {

// True for headers that describe one connection and must not be forwarded (RFC 9110 7.6.1). Every such name is
// one Beast knows, so a parsed field's code says it without comparing its name.
constexpr bool isHopByHop(boost::beast::http::field f) {
  using boost::beast::http::field;
  switch (f) {
    case field::connection:
    case field::keep_alive:
    case field::proxy_connection:
    case field::te:
    case field::trailer:
    case field::transfer_encoding:
    case field::upgrade:
    case field::expect:
    case field::proxy_authorization: return true;
    default: return false;
  }
}
bool isHopByHop(std::string_view name);
// True when `name` is listed in a Connection header's value (those headers are hop-by-hop too).
bool namedByConnection(std::string_view connection_tokens, std::string_view name);
// True when a Connection header's value names any field that is not hop-by-hop already ("keep-alive" and "close",
// what engines send, name none): only then is each field looked up in it.
bool namesOtherFields(std::string_view connection_tokens);

// Literals as string_views: their lengths are known, where append(const char*) calls strlen on every field.
inline constexpr std::string_view kFieldSeparator = ": ";
inline constexpr std::string_view kLineEnd = "\r\n";

// One growth of `out` and two copies, the separators stored in place (four appends cost a capacity check and a
// library copy each).
inline void appendField(std::string& out, std::string_view name, std::string_view value) {
  const size_t at = out.size();
  out.resize(at + name.size() + value.size() + 4);
  char* w = out.data() + at;
  std::memcpy(w, name.data(), name.size());
  w += name.size();
  std::memcpy(w, kFieldSeparator.data(), 2);
  w += 2;
  std::memcpy(w, value.data(), value.size());
  std::memcpy(w + value.size(), kLineEnd.data(), 2);
}

// Appends the end-to-end fields of `fields` (a Beast header), leaving out the hop-by-hop ones, those its
// Connection header names, Content-Length (the writer frames the body itself) and those `skip(field)` rejects
// (fields the writer sets itself).
template <class Fields, class Skip>
void appendEndToEndFields(std::string& out, const Fields& fields, Skip skip) {
  const std::string_view connection_tokens = fields[boost::beast::http::field::connection];
  const bool check_connection = namesOtherFields(connection_tokens);
  for (const auto& field : fields) {
    if (field.name() == boost::beast::http::field::content_length || isHopByHop(field.name()) || skip(field)) continue;
    const std::string_view name = field.name_string();
    if (check_connection && namedByConnection(connection_tokens, name)) continue;
    appendField(out, name, field.value());
  }
}

}  // namespace prefixgate::proxy
