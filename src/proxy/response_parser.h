#pragma once
// The engine's response as the relay reads it: Beast's HTTP/1.1 parser (its framing, limits and validation, all of
// basic_parser) with a head store of the relay's own. Beast's response_parser keeps the head in basic_fields, an
// allocated element and an ordered-tree insert per field, read back by tree lookups; the relay only copies the
// fields through in order and looks up two or three of them, so here the fields are kept as text in one recycled
// buffer with an entry each, and looked up by a scan of those few entries. The body is read into the caller's
// buffer exactly as Beast's buffer_body does (body().data / size before a read, what is left after it).
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>
#include <cstdint>
#include <string_view>
#include <vector>

#include "util/recycling_allocator.h"

namespace prefixgate::proxy {

class ResponseHead {
 public:
  // One field as read, in the order of the head.
  struct Field {
    boost::beast::http::field code;  // field::unknown for a name Beast does not know
    std::string_view name_text;
    std::string_view value_text;
    boost::beast::http::field name() const { return code; }
    std::string_view name_string() const { return name_text; }
    std::string_view value() const { return value_text; }
  };
  class Iterator {
   public:
    Iterator(const ResponseHead* head, size_t i) : head_(head), i_(i) {}
    Field operator*() const { return head_->at(i_); }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator!=(const Iterator& other) const { return i_ != other.i_; }

   private:
    const ResponseHead* head_;
    size_t i_;
  };

  unsigned result_int() const { return status_; }
  boost::beast::http::status result() const { return boost::beast::http::int_to_status(status_); }
  unsigned version() const { return version_; }
  // The first field with this code's value; "" when there is none (as basic_fields::operator[]).
  std::string_view operator[](boost::beast::http::field code) const;
  size_t fieldCount() const { return entries_.size(); }
  Field at(size_t i) const;
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, entries_.size()}; }
  boost::beast::http::buffer_body::value_type& body() { return body_; }

 private:
  friend class ResponseParser;
  struct Entry {
    boost::beast::http::field code;
    uint32_t name_at, name_size, value_at, value_size;
  };
  unsigned status_ = 0;
  unsigned version_ = 0;
  util::RecycledString text_;  // every name and value, back to back
  std::vector<Entry, util::RecyclingAllocator<Entry>> entries_;
  boost::beast::http::buffer_body::value_type body_;
};

class ResponseParser : public boost::beast::http::basic_parser<false> {
 public:
  ResponseParser();
  ResponseHead& get() { return head_; }
  const ResponseHead& get() const { return head_; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb, string_view, string_view, int, error_code&) override;
  void on_response_impl(int code, string_view reason, int version, error_code& ec) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length, error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;
  // Copies body bytes into the caller's buffer as buffer_body's reader does: need_buffer when there is no buffer or
  // it filled before `body` was all taken.
  std::size_t copyBody(string_view body, error_code& ec);

  ResponseHead head_;
};

}  // namespace prefixgate::proxy
