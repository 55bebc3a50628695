#include "server/request_parser.h"

#include <array>
#include <boost/assert.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/verb.hpp>
#include <cstring>

#include "proxy/head_scan.h"

namespace prefixgate::server {
namespace http = boost::beast::http;
using boost::beast::error_code;
using proxy::nameEqualsLower;

namespace {

// The most fields a head read directly may have (a client sends a handful); one with more goes to Beast's parser.
constexpr size_t kMaxDirectFields = 32;

struct DirectField {
  http::field code;
  std::string_view name;
  std::string_view value;
};

}  // namespace

http::field requestFieldCode(std::string_view name) {
  switch (name.size()) {
    case 4:
      if (proxy::name4EqualsLower(name, "host")) return http::field::host;
      break;
    case 6:
      if (boost::beast::iequals(name, "accept")) return http::field::accept;
      break;
    case 10:
      if (nameEqualsLower(name, "connection")) return http::field::connection;
      if (nameEqualsLower(name, "user-agent")) return http::field::user_agent;
      break;
    case 12:
      if (nameEqualsLower(name, "content-type")) return http::field::content_type;
      break;
    case 13:
      if (nameEqualsLower(name, "authorization")) return http::field::authorization;
      break;
    case 14:
      if (nameEqualsLower(name, "content-length")) return http::field::content_length;
      break;
    case 15:
      if (nameEqualsLower(name, "accept-encoding")) return http::field::accept_encoding;
      break;
    default: break;
  }
  return http::string_to_field({name.data(), name.size()});
}

// --- Beast's parser ---------------------------------------------------------------------------------------------

void BeastRequestParser::startChunkedBody() {
  static constexpr std::string_view kHead = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  starting_ = true;
  error_code ec;
  const bool was_eager = eager();
  eager(false);  // only the head: the body's bytes come with the caller's next put
  [[maybe_unused]] const size_t used = put(boost::asio::buffer(kHead.data(), kHead.size()), ec);
  eager(was_eager);
  starting_ = false;
  BOOST_ASSERT(!ec && used == kHead.size() && is_header_done() && chunked());
}

void BeastRequestParser::on_request_impl(http::verb method, string_view method_str, string_view target, int version,
                                         error_code&) {
  if (starting_) return;
  message_.target(target);
  if (method != http::verb::unknown)
    message_.method(method);
  else
    message_.method_string(method_str);
  message_.version(static_cast<unsigned>(version));
}

void BeastRequestParser::on_response_impl(int, string_view, int, error_code&) {}  // a request

void BeastRequestParser::on_field_impl(http::field name, string_view name_string, string_view value, error_code&) {
  if (starting_) return;
  message_.insert(name, name_string, value);
}

void BeastRequestParser::on_header_impl(error_code&) {}

void BeastRequestParser::on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) {}

std::size_t BeastRequestParser::on_body_impl(string_view body, error_code& ec) {
  return GrowingStringBody::append(message_.body(), {body.data(), body.size()}, ec);
}

void BeastRequestParser::on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) {
  check_(size, {extensions.data(), extensions.size()}, ec);
}

std::size_t BeastRequestParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  return GrowingStringBody::append(message_.body(), {body.data(), body.size()}, ec);
}

void BeastRequestParser::on_finish_impl(error_code&) {}

// --- The session's parser ---------------------------------------------------------------------------------------

size_t RequestParser::readHead(const char* const p, size_t n) {
  // Beast reads a head within the first header_limit bytes; one that does not end there is its error to give.
  const char* const end = p + std::min<size_t>(n, header_limit_);
  // request-line = method SP request-target SP "HTTP/1." ("0" / "1") CRLF; a method Beast knows by name.
  const char* q = p;
  while (q < end && proxy::kTokenChar[static_cast<unsigned char>(*q)]) ++q;
  if (q == p || q == end || *q != ' ') return 0;
  const std::string_view method(p, q - p);
  const http::verb verb = method == "POST" ? http::verb::post : http::string_to_verb({method.data(), method.size()});
  if (verb == http::verb::unknown) return 0;
  const char* const target = ++q;
  q = proxy::targetEnd(q, end);
  if (q == target || q == end || *q != ' ') return 0;
  const std::string_view target_text(target, q - target);
  ++q;
  if (end - q < 10 || std::memcmp(q, "HTTP/1.", 7) != 0 || (q[7] != '0' && q[7] != '1') || q[8] != '\r' ||
      q[9] != '\n')
    return 0;
  const unsigned version = q[7] == '1' ? 11 : 10;
  q += 10;
  std::array<DirectField, kMaxDirectFields> fields;
  size_t count = 0;
  bool has_length = false, chunked = false;
  uint64_t length = 0;
  for (;;) {
    if (end - q < 2) return 0;
    if (q[0] == '\r') {
      if (q[1] != '\n') return 0;
      break;
    }
    proxy::FieldLine line;
    q = proxy::readFieldLine(q, end, line);
    if (q == nullptr || count == fields.size()) return 0;
    const http::field code = requestFieldCode(line.name);
    // The fields that frame the body or change the connection, as Beast's parser reads them; any form but the
    // plainest is left to it.
    switch (code) {
      case http::field::content_length:
        if (has_length || chunked || !proxy::plainLength(line.value, length)) return 0;
        has_length = true;
        break;
      case http::field::transfer_encoding:
        if (has_length || chunked || version != 11 || !boost::beast::iequals(line.value, "chunked")) return 0;
        chunked = true;
        break;
      case http::field::connection:
      case http::field::proxy_connection:
        if (!proxy::isOneToken(line.value) || boost::beast::iequals(line.value, "upgrade")) return 0;
        break;
      case http::field::upgrade: return 0;
      default: break;
    }
    fields[count++] = {code, line.name, line.value};
  }
  // A length over the limit is Beast's error to give (with the head's method and target, which name the answer's
  // shape).
  if (has_length && body_limit_ && length > *body_limit_) return 0;
  message_.method(verb);
  message_.target({target_text.data(), target_text.size()});
  message_.version(version);
  for (size_t i = 0; i < count; ++i) {
    const DirectField& f = fields[i];
    message_.insert(f.code, {f.name.data(), f.name.size()}, {f.value.data(), f.value.size()});
  }
  has_length_ = has_length;
  chunked_ = chunked;
  length_ = remaining_ = length;
  if (chunked) {
    startChunked();
  } else {
    mode_ = length > 0 ? Mode::kLength : Mode::kDone;
  }
  return static_cast<size_t>(q + 2 - p);
}

size_t RequestParser::put(boost::asio::const_buffer buffer, error_code& ec) {
  const char* const p = static_cast<const char*>(buffer.data());
  const size_t n = buffer.size();
  ec = {};
  switch (mode_) {
    case Mode::kStart: {
      if (n == 0) {
        ec = http::error::need_more;
        return 0;
      }
      if (const size_t used = readHead(p, n)) {
        // As Beast: an eager parser goes on into the body in the same call.
        if (!eager_ || used == n || mode_ == Mode::kDone) return used;
        return used + put(boost::asio::const_buffer(p + used, n - used), ec);
      }
      // Not a head to read directly: Beast's parser reads the whole request, from this first byte on.
      return putToBeast(buffer, ec);
    }
    case Mode::kBeast:
    case Mode::kChunked: return beast_.put(buffer, ec);
    case Mode::kLength: {
      const size_t used = GrowingStringBody::append(
          message_.body(), {p, static_cast<size_t>(std::min<uint64_t>(remaining_, n))}, ec);
      remaining_ -= used;
      if (!ec && remaining_ == 0) mode_ = Mode::kDone;
      return used;
    }
    case Mode::kToEof:  // a request's body is never delimited by the connection's end
    case Mode::kDone: break;
  }
  ec = http::error::stale_parser;
  return 0;
}

void RequestParser::put_eof(error_code& ec) {
  ec = {};
  switch (mode_) {
    case Mode::kBeast:
    case Mode::kChunked: beast_.put_eof(ec); return;
    case Mode::kStart:
    case Mode::kLength:
    case Mode::kToEof: ec = http::error::partial_message; return;
    case Mode::kDone: return;
  }
}

}  // namespace prefixgate::server
