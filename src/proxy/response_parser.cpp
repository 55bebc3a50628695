#include "proxy/response_parser.h"

#include "proxy/head_scan.h"
#include "proxy/head_text.h"

#include <algorithm>
#include <boost/assert.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <cstring>

namespace prefixgate::proxy {
namespace http = boost::beast::http;
using boost::beast::error_code;

namespace {

// Room for a typical engine head (a handful of fields of a few dozen bytes) before any growth.
constexpr size_t kTextReserve = 512;
constexpr size_t kEntriesReserve = 16;

// ASCII case-insensitive equality (Beast's).
bool equalsLower(std::string_view text, std::string_view lowercase) { return boost::beast::iequals(text, lowercase); }

}  // namespace

http::field relayFieldCode(http::field code) {
  return isHopByHop(code) || code == http::field::content_length || code == http::field::content_type
             ? code
             : http::field::unknown;
}

http::field relayFieldCode(std::string_view name) {
  // The names of the codes kept above (NamesTheRelaysFieldsAsBeastDoes checks the two agree on every name Beast
  // knows). Names of 10 to 16 bytes (every engine head has several: content-type, content-length, connection) by words.
  switch (name.size()) {
    case 2: return equalsLower(name, "te") ? http::field::te : http::field::unknown;
    case 6: return equalsLower(name, "expect") ? http::field::expect : http::field::unknown;
    case 7:
      if (equalsLower(name, "trailer")) return http::field::trailer;
      return equalsLower(name, "upgrade") ? http::field::upgrade : http::field::unknown;
    case 10:
      if (nameEqualsLower(name, "connection")) return http::field::connection;
      return nameEqualsLower(name, "keep-alive") ? http::field::keep_alive : http::field::unknown;
    case 12: return nameEqualsLower(name, "content-type") ? http::field::content_type : http::field::unknown;
    case 14: return nameEqualsLower(name, "content-length") ? http::field::content_length : http::field::unknown;
    case 16: return nameEqualsLower(name, "proxy-connection") ? http::field::proxy_connection : http::field::unknown;
    case 17: return equalsLower(name, "transfer-encoding") ? http::field::transfer_encoding : http::field::unknown;
    case 19:
      return equalsLower(name, "proxy-authorization") ? http::field::proxy_authorization : http::field::unknown;
    default: return http::field::unknown;
  }
}

std::string_view ResponseHead::operator[](http::field code) const {
  for (const Entry& e : entries_)
    if (e.code == code) return {text_.data() + e.value_at, e.value_size};
  return {};
}

ResponseHead::Field ResponseHead::at(size_t i) const {
  const Entry& e = entries_[i];
  return {e.code, {text_.data() + e.name_at, e.name_size}, {text_.data() + e.value_at, e.value_size}};
}

void ResponseHead::add(http::field code, std::string_view name, std::string_view value) {
  // The head's size is bounded by header_limit (at most 4 GiB here, far above any limit set), so the offsets fit.
  entries_.push_back({code, static_cast<uint32_t>(text_.size()), static_cast<uint32_t>(name.size()),
                      static_cast<uint32_t>(text_.size() + name.size()), static_cast<uint32_t>(value.size())});
  text_.append(name.data(), name.size()).append(value.data(), value.size());
}

size_t copyBody(ResponseHead& head, std::string_view body, error_code& ec) {
  http::buffer_body::value_type& to = head.body();
  if (to.data == nullptr) {
    ec = http::error::need_buffer;
    return 0;
  }
  const size_t n = std::min(to.size, body.size());
  if (n > 0) std::memcpy(to.data, body.data(), n);
  to.data = static_cast<char*>(to.data) + n;
  to.size -= n;
  if (n != body.size()) ec = http::error::need_buffer;
  return n;
}

// --- Beast's parser ---------------------------------------------------------------------------------------------

void BeastResponseParser::startChunkedBody() {
  static constexpr std::string_view kHead = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  starting_ = true;
  error_code ec;
  [[maybe_unused]] const size_t used = put(boost::asio::buffer(kHead.data(), kHead.size()), ec);
  starting_ = false;
  BOOST_ASSERT(!ec && used == kHead.size() && is_header_done() && chunked());
}

void BeastResponseParser::on_request_impl(http::verb, string_view, string_view, int, error_code&) {}  // a response

void BeastResponseParser::on_response_impl(int code, string_view, int version, error_code&) {
  if (starting_) return;
  head_.status_ = static_cast<unsigned>(code);  // three digits: the parser checked them
  head_.version_ = static_cast<unsigned>(version);
}

void BeastResponseParser::on_field_impl(http::field name, string_view name_string, string_view value, error_code&) {
  if (starting_) return;
  head_.add(relayFieldCode(name), {name_string.data(), name_string.size()}, {value.data(), value.size()});
}

void BeastResponseParser::on_header_impl(error_code&) {}

void BeastResponseParser::on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) {}

std::size_t BeastResponseParser::on_body_impl(string_view body, error_code& ec) {
  return copyBody(head_, {body.data(), body.size()}, ec);
}

void BeastResponseParser::on_chunk_header_impl(std::uint64_t, string_view, error_code&) {}

std::size_t BeastResponseParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  return copyBody(head_, {body.data(), body.size()}, ec);
}

void BeastResponseParser::on_finish_impl(error_code&) {}

// --- The relay's parser -----------------------------------------------------------------------------------------

ResponseParser::ResponseParser() : DirectParser(8u << 20) {  // Beast's default body limit for responses
  message_.text_.reserve(kTextReserve);
  message_.entries_.reserve(kEntriesReserve);
}

size_t ResponseParser::readHead(const char* const p, size_t n) {
  // Beast reads a head within the first header_limit bytes; one that does not end there is its error to give.
  const char* const end = p + std::min<size_t>(n, header_limit_);
  // status-line = "HTTP/1." ("0" / "1") SP 3DIGIT SP reason-phrase CRLF
  if (end - p < 13 || std::memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') || p[8] != ' ' ||
      !isDigit(p[9]) || !isDigit(p[10]) || !isDigit(p[11]) || p[12] != ' ')
    return 0;
  const char* q = valueLineEnd(p + 13, end);
  if (q == nullptr) return 0;
  q += 2;
  const char* const fields = q;
  for (;;) {
    if (end - q < 2) return 0;
    if (q[0] == '\r') {
      if (q[1] != '\n') return 0;
      break;
    }
    FieldLine line;
    const char* const name = q;
    q = readFieldLine(q, end, line);
    if (q == nullptr) return 0;
    const std::string_view name_text = line.name, value_text = line.value;
    const char* const value = value_text.data();
    const http::field code = relayFieldCode(name_text);
    // The fields that frame the body, as Beast's parser reads them; any form but the plainest is left to it.
    switch (code) {
      case http::field::content_length:
        if (has_length_ || chunked_ || !plainLength(value_text, length_)) return 0;
        has_length_ = true;
        break;
      case http::field::transfer_encoding:
        if (has_length_ || chunked_ || !equalsLower(value_text, "chunked")) return 0;
        chunked_ = true;
        break;
      case http::field::connection:
      case http::field::proxy_connection:
        if (!isOneToken(value_text)) return 0;
        if (equalsLower(value_text, "close")) connection_close_ = true;
        else if (equalsLower(value_text, "keep-alive")) connection_keep_alive_ = true;
        break;
      default: break;
    }
    message_.entries_.push_back({code, static_cast<uint32_t>(name - fields), static_cast<uint32_t>(name_text.size()),
                                 static_cast<uint32_t>(value - fields), static_cast<uint32_t>(value_text.size())});
  }
  message_.text_.assign(fields, q - fields);
  message_.status_ = static_cast<unsigned>((p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0'));
  message_.version_ = p[7] == '1' ? 11 : 10;
  http11_ = p[7] == '1';
  return static_cast<size_t>(q + 2 - p);
}

void ResponseParser::frameBody(error_code& ec) {
  // RFC 9112 6.3, as Beast's finish_header: no body for 1xx, 204 and 304 whatever the head says.
  ec = {};
  const unsigned status = message_.status_;
  if (status / 100 == 1 || status == 204 || status == 304) {
    mode_ = Mode::kDone;
  } else if (has_length_) {
    mode_ = length_ > 0 ? Mode::kLength : Mode::kDone;
    remaining_ = length_;
    if (length_ > 0 && body_limit_ && length_ > *body_limit_) ec = http::error::body_limit;
  } else if (chunked_) {
    startChunked();
  } else {
    need_eof_ = true;
    mode_ = Mode::kToEof;
  }
}

bool ResponseParser::keep_alive() const {
  if (mode_ == Mode::kBeast) return beast_.keep_alive();
  // Beast's rule: HTTP/1.1 unless "close", HTTP/1.0 only with "keep-alive"; never a body ended by the close.
  return (http11_ ? !connection_close_ : connection_keep_alive_) && !need_eof_;
}

bool ResponseParser::need_eof() const { return mode_ == Mode::kBeast ? beast_.need_eof() : need_eof_; }

size_t ResponseParser::put(boost::asio::const_buffer buffer, error_code& ec) {
  const char* const p = static_cast<const char*>(buffer.data());
  const size_t n = buffer.size();
  switch (mode_) {
    case Mode::kStart: {
      if (n == 0) {
        ec = http::error::need_more;
        return 0;
      }
      if (const size_t used = readHead(p, n)) {
        frameBody(ec);
        return used;
      }
      // Not a head to read directly: Beast's parser reads the whole response, from this first byte on.
      message_.clear();
      has_length_ = chunked_ = connection_close_ = connection_keep_alive_ = false;
      return putToBeast(buffer, ec);
    }
    case Mode::kBeast:
    case Mode::kChunked: return beast_.put(buffer, ec);
    case Mode::kLength: {
      ec = {};
      const size_t used = copyBody(message_, {p, static_cast<size_t>(std::min<uint64_t>(remaining_, n))}, ec);
      remaining_ -= used;
      if (!ec && remaining_ == 0) mode_ = Mode::kDone;
      return used;
    }
    case Mode::kToEof:
      // As Beast: the limit counts every byte offered, taken or not.
      if (body_limit_) {
        if (n > *body_limit_) {
          ec = http::error::body_limit;
          return 0;
        }
        *body_limit_ -= n;
      }
      ec = {};
      return copyBody(message_, {p, n}, ec);
    case Mode::kDone: break;
  }
  ec = http::error::stale_parser;
  return 0;
}

void ResponseParser::put_eof(error_code& ec) {
  ec = {};
  switch (mode_) {
    case Mode::kBeast:
    case Mode::kChunked: beast_.put_eof(ec); return;
    case Mode::kLength: ec = http::error::partial_message; return;
    case Mode::kStart:
    case Mode::kToEof: mode_ = Mode::kDone; return;
    case Mode::kDone: return;
  }
}

}  // namespace prefixgate::proxy
