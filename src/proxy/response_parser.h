#pragma once
// The engine's response as the relay reads it. An engine's head nearly always arrives whole in one read and is plain
// (HTTP/1.1 or 1.0, a handful of fields, one Content-Length or `Transfer-Encoding: chunked`): such a head is read
// directly, in one pass over its bytes, and its body framed by the parser itself (a length, or the connection's end);
// a chunked body's framing is Beast's, started after a head that says only that. Every other case (a head split over
// reads, an odd or invalid byte, a folded line, a second length, a list in Connection or Transfer-Encoding) goes,
// from its first byte, to Beast's HTTP/1.1 parser (basic_parser: its framing, limits and validation), so what the
// relay accepts, and how it fails, is Beast's in every case: the direct reader takes a subset of the heads Beast
// accepts and reads them as Beast does (tests/unit/core/proxy/response_parser_test.cpp and the fuzz target
// upstream_response_fuzz.cpp compare the two on the same bytes in the same pieces).
//
// The head is kept as text in one recycled buffer with an entry per field, in the engine's order (Beast's
// basic_fields would group repeated names), looked up by a scan of those few entries. The body is read into the
// caller's buffer exactly as Beast's buffer_body does (body().data / size before a read, what is left after it).
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/optional/optional.hpp>
#include <cstdint>
#include <string_view>
#include <vector>

#include "proxy/direct_parser.h"
#include "util/recycling_allocator.h"

namespace prefixgate::proxy {

// The field codes the relay acts on (hop-by-hop names, Content-Length, Content-Type) as Beast's
// string_to_field gives them; every other name is field::unknown (the relay copies those through by name).
boost::beast::http::field relayFieldCode(boost::beast::http::field code);
// The same for a field name (token characters, as a head's field names are), in any ASCII case.
boost::beast::http::field relayFieldCode(std::string_view name);

class ResponseHead {
 public:
  // One field as read, in the order of the head.
  struct Field {
    boost::beast::http::field code;  // relayFieldCode(name)
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
  // The first field with this code's value (a code relayFieldCode keeps); "" when there is none.
  std::string_view operator[](boost::beast::http::field code) const;
  size_t fieldCount() const { return entries_.size(); }
  Field at(size_t i) const;
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, entries_.size()}; }
  boost::beast::http::buffer_body::value_type& body() { return body_; }

 private:
  friend class ResponseParser;
  friend class BeastResponseParser;
  struct Entry {
    boost::beast::http::field code;
    uint32_t name_at, name_size, value_at, value_size;
  };
  void clear() {
    text_.clear();
    entries_.clear();
  }
  // Appends a field's name and value to the text and an entry for them.
  void add(boost::beast::http::field code, std::string_view name, std::string_view value);
  unsigned status_ = 0;
  unsigned version_ = 0;
  util::RecycledString text_;  // the fields' text (names and values at the entries' offsets)
  std::vector<Entry, util::RecyclingAllocator<Entry>> entries_;
  boost::beast::http::buffer_body::value_type body_;
};

// Beast's HTTP/1.1 response parser writing the head into a ResponseHead and the body into its buffer_body: the
// reader of every head the direct reader leaves (from its first byte), and of chunked bodies.
class BeastResponseParser : public boost::beast::http::basic_parser<false> {
 public:
  explicit BeastResponseParser(ResponseHead& head) : head_(head) {}
  // Reads a head that says only `Transfer-Encoding: chunked` without telling head_: the parser then reads a chunked
  // body from the next byte on, as after the engine's own head (which the direct reader read).
  void startChunkedBody();

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

  ResponseHead& head_;
  bool starting_ = false;  // startChunkedBody's head is being read: nothing goes to head_
};

// Copies body bytes into `head`'s buffer as buffer_body's reader does: need_buffer when there is no buffer or it
// filled before `body` was all taken. Returns the bytes taken.
size_t copyBody(ResponseHead& head, std::string_view body, boost::beast::error_code& ec);

// The interface of Beast's basic_parser that the relay, net::ReadyReader and net::parseBuffered use, with its
// semantics (put consumes what it parsed, need_more when it needs more, put_eof at the connection's end).
class ResponseParser : public DirectParser<ResponseHead, BeastResponseParser> {
 public:
  ResponseParser();

  bool keep_alive() const;
  bool need_eof() const;
  size_t put(boost::asio::const_buffer buffer, boost::beast::error_code& ec);
  void put_eof(boost::beast::error_code& ec);

 private:
  // Reads a whole head from `p` when it is there and plain: returns its size (0: not read; nothing changed).
  size_t readHead(const char* p, size_t n);
  // After a head read directly: how its body is framed. `ec` is body_limit for a length above the limit.
  void frameBody(boost::beast::error_code& ec);

  // What a head read directly said, beyond the framing DirectParser keeps.
  bool http11_ = false;
  bool connection_close_ = false;
  bool connection_keep_alive_ = false;
  bool need_eof_ = false;
};

}  // namespace prefixgate::proxy
