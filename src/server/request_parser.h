#pragma once
// A client's request as the session reads it. A client's head nearly always arrives whole in the connection's first
// read and is plain (a known method, an origin-form target, HTTP/1.1, a handful of fields, one Content-Length or none):
// such a head is read directly, in one pass over its bytes, and a Content-Length body framed by the parser itself; a
// chunked body's framing is Beast's, started after a head that says only that. Every other head (split over reads,
// an odd or invalid byte, a folded line, a list in Content-Length, Connection or Transfer-Encoding, Upgrade, a length
// over the body limit, a head beyond header_limit, more fields than the direct reader holds) goes, from its first
// byte, to Beast's HTTP/1.1 request parser (basic_parser: its framing, limits and validation), so what the gateway
// accepts, and how it fails, is Beast's in every case: the direct reader takes a subset of the heads Beast accepts and
// reads them as Beast does (tests/unit/core/server/request_parser_test.cpp and the fuzz target http_request_fuzz.cpp
// compare the two on the same bytes in the same pieces). The same design as the relay's reader of engine responses
// (proxy/response_parser.h), with which it shares the byte scans (proxy/head_scan.h).
//
// The head is written into Beast's header type (proxy::ClientHead), field codes as Beast's string_to_field gives
// them, and the body into a GrowingStringBody's string as Beast's http::parser would (appended, never reserved).
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional/optional.hpp>
#include <cstdint>
#include <string_view>

#include "proxy/client_head.h"
#include "proxy/direct_parser.h"
#include "server/request_body.h"

namespace prefixgate::server {

// The client's head and body.
using ClientRequest = boost::beast::http::message<true, GrowingStringBody, proxy::Fields>;

// The field code Beast's string_to_field gives `name` (token characters, as a head's field names are): the names
// every client sends known by length and a word compare, the rest by Beast's own lookup.
boost::beast::http::field requestFieldCode(std::string_view name);

// Called with each chunk's size and extensions as Beast's http::parser::on_chunk_header's callback is: an error it
// sets fails the body.
class ChunkHeaderCheck {
 public:
  ChunkHeaderCheck() = default;
  template <class Callback>
  explicit ChunkHeaderCheck(Callback& callback)
      : target_(&callback),
        call_([](void* target, uint64_t size, std::string_view extensions, boost::beast::error_code& ec) {
          (*static_cast<Callback*>(target))(size, extensions, ec);
        }) {}
  void operator()(uint64_t size, std::string_view extensions, boost::beast::error_code& ec) const {
    if (call_) call_(target_, size, extensions, ec);
  }

 private:
  void* target_ = nullptr;
  void (*call_)(void*, uint64_t, std::string_view, boost::beast::error_code&) = nullptr;
};

// Beast's HTTP/1.1 request parser writing into a ClientRequest exactly as http::parser<true, GrowingStringBody> does:
// the reader of every head the direct reader leaves (from its first byte), and of chunked bodies.
class BeastRequestParser : public boost::beast::http::basic_parser<true> {
 public:
  explicit BeastRequestParser(ClientRequest& message) : message_(message) {}
  // Reads a head that says only `Transfer-Encoding: chunked` without writing it into the message: the parser then
  // reads a chunked body from the next byte on, as after the client's own head (which the direct reader read).
  void startChunkedBody();
  void checkChunks(ChunkHeaderCheck check) { check_ = check; }

 private:
  using error_code = boost::beast::error_code;
  using string_view = boost::beast::string_view;
  void on_request_impl(boost::beast::http::verb method, string_view method_str, string_view target, int version,
                       error_code& ec) override;
  void on_response_impl(int, string_view, int, error_code&) override;
  void on_field_impl(boost::beast::http::field name, string_view name_string, string_view value,
                     error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length, error_code& ec) override;
  std::size_t on_body_impl(string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, string_view extensions, error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, string_view body, error_code& ec) override;
  void on_finish_impl(error_code& ec) override;

  ClientRequest& message_;
  ChunkHeaderCheck check_;
  bool starting_ = false;  // startChunkedBody's head is being read: nothing goes to the message
};

// The interface of Beast's http::request_parser that the session and net::parseBuffered use, with its semantics
// (put consumes what it parsed, need_more when it needs more, eager to go on past the head in the same call,
// put_eof at the connection's end). One request: a new parser for each.
class RequestParser : public proxy::DirectParser<ClientRequest, BeastRequestParser> {
 public:
  using value_type = ClientRequest;

  RequestParser() : DirectParser(1u << 20) {}  // Beast's default body limit for requests

  void eager(bool v) {
    eager_ = v;
    beast_.eager(v);
  }
  // The chunk check is kept by reference, as Beast's http::parser keeps it: it must outlive the parser.
  template <class Callback>
  void on_chunk_header(Callback& callback) {
    beast_.checkChunks(ChunkHeaderCheck(callback));
  }
  size_t put(boost::asio::const_buffer buffer, boost::beast::error_code& ec);
  void put_eof(boost::beast::error_code& ec);

 private:
  // Reads a whole head from `p` when it is there and plain: returns its size (0: not read; nothing changed).
  size_t readHead(const char* p, size_t n);

  bool eager_ = false;
};

}  // namespace prefixgate::server
