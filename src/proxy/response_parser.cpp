#include "proxy/response_parser.h"

#include <boost/beast/http/error.hpp>
#include <cstring>

namespace prefixgate::proxy {
namespace http = boost::beast::http;

namespace {
// Room for a typical engine head (a handful of fields of a few dozen bytes) before any growth.
constexpr size_t kTextReserve = 512;
constexpr size_t kEntriesReserve = 16;
}  // namespace

std::string_view ResponseHead::operator[](http::field code) const {
  for (const Entry& e : entries_)
    if (e.code == code) return {text_.data() + e.value_at, e.value_size};
  return {};
}

ResponseHead::Field ResponseHead::at(size_t i) const {
  const Entry& e = entries_[i];
  return {e.code, {text_.data() + e.name_at, e.name_size}, {text_.data() + e.value_at, e.value_size}};
}

ResponseParser::ResponseParser() {
  head_.text_.reserve(kTextReserve);
  head_.entries_.reserve(kEntriesReserve);
}

void ResponseParser::on_request_impl(http::verb, string_view, string_view, int, error_code&) {}  // never: a response

void ResponseParser::on_response_impl(int code, string_view, int version, error_code&) {
  head_.status_ = static_cast<unsigned>(code);  // three digits: the parser checked them
  head_.version_ = static_cast<unsigned>(version);
}

void ResponseParser::on_field_impl(http::field name, string_view name_string, string_view value, error_code&) {
  // The head's size is bounded by header_limit (at most 4 GiB here, far above any limit set), so the offsets fit.
  ResponseHead::Entry e{name, static_cast<uint32_t>(head_.text_.size()), static_cast<uint32_t>(name_string.size()),
                        static_cast<uint32_t>(head_.text_.size() + name_string.size()),
                        static_cast<uint32_t>(value.size())};
  head_.text_.append(name_string.data(), name_string.size()).append(value.data(), value.size());
  head_.entries_.push_back(e);
}

void ResponseParser::on_header_impl(error_code&) {}

void ResponseParser::on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) {}

std::size_t ResponseParser::copyBody(string_view body, error_code& ec) {
  http::buffer_body::value_type& to = head_.body_;
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

std::size_t ResponseParser::on_body_impl(string_view body, error_code& ec) { return copyBody(body, ec); }

void ResponseParser::on_chunk_header_impl(std::uint64_t, string_view, error_code&) {}

std::size_t ResponseParser::on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) {
  return copyBody(body, ec);
}

void ResponseParser::on_finish_impl(error_code&) {}

}  // namespace prefixgate::proxy
