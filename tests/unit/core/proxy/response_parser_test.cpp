// The relay's response parser against Beast's response_parser<buffer_body>, which it replaces: the same bytes in the
// same pieces, read as the relay reads them (the head, then the body through a small caller's buffer), give the same
// status, the same fields in the same order (codes: those the relay acts on, relayFieldCode), the same framing and
// the same body bytes, or fail with the same error. Whole plain heads are read by the parser's direct reader, every
// other one by Beast's parser inside it: both paths are compared, and which one read each head is checked.
#include "proxy/response_parser.h"

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "fuzz/basic_fields_order.h"
#include "unit/core/parser_pieces.h"

namespace prefixgate::proxy {
namespace {

namespace http = boost::beast::http;
using boost::beast::error_code;

struct Parsed {
  error_code head_error, body_error;
  unsigned status = 0, version = 0;
  std::vector<std::tuple<int, std::string, std::string>> fields;  // code, name, value
  std::string content_type, connection;
  std::optional<uint64_t> content_length;
  bool keep_alive = false, chunked = false, need_eof = false, done = false;
  std::string body;
  bool operator==(const Parsed&) const = default;
};

template <class Parser>
bool readDirectly(const Parser&) {
  return false;
}
bool readDirectly(const ResponseParser& parser) { return parser.headReadDirectly(); }

std::ostream& operator<<(std::ostream& os, const Parsed& p) {
  os << "head_error=" << p.head_error.message() << " body_error=" << p.body_error.message() << " status=" << p.status
     << " version=" << p.version << " fields=[";
  for (const auto& [code, name, value] : p.fields) os << code << ":" << name << "=" << value << ";";
  return os << "] done=" << p.done << " body=" << p.body.size() << " bytes";
}

// Feeds `input` in pieces of `piece` bytes (0: whole) as reads would, the body through a buffer of `room` bytes.
template <class Parser>
Parsed parse(std::string_view input, size_t piece, size_t room, bool* direct = nullptr) {
  Parser parser;
  parser.header_limit(8192);
  parser.body_limit(1 << 20);
  test_support::PieceFeeder feed(input, piece);
  auto readSome = [&] { return feed.readSome(parser); };
  Parsed out;
  while (!parser.is_header_done()) {
    out.head_error = readSome();
    if (out.head_error == http::error::need_buffer) out.head_error = {};
    if (out.head_error) return out;
  }
  auto& head = parser.get();
  out.status = head.result_int();
  out.version = head.version();
  for (const auto& f : head)
    out.fields.emplace_back(static_cast<int>(relayFieldCode(f.name())), std::string(f.name_string()),
                            std::string(f.value()));
  out.content_type = std::string(head[http::field::content_type]);
  out.connection = std::string(head[http::field::connection]);
  if (const auto length = parser.content_length()) out.content_length = *length;
  out.keep_alive = parser.keep_alive();
  out.chunked = parser.chunked();
  out.need_eof = parser.need_eof();
  if (direct) *direct = readDirectly(parser);
  std::string room_buffer(room, '\0');
  for (size_t reads = 0; !parser.is_done() && reads < 100000; ++reads) {
    head.body().data = room_buffer.data();
    head.body().size = room_buffer.size();
    error_code ec = readSome();
    if (ec == http::error::need_buffer) ec = {};
    out.body.append(room_buffer.data(), room_buffer.size() - head.body().size);
    if (ec) {
      out.body_error = ec;
      break;
    }
  }
  out.done = parser.is_done();
  return out;
}

using BeastParser = http::response_parser<http::buffer_body>;

// Compares the two on `input` in pieces of several sizes; true when the whole input (one piece) was read directly.
bool expectSameAsBeast(std::string_view input, const std::string& what) {
  bool whole_direct = false;
  for (size_t piece : {size_t{0}, size_t{1}, size_t{3}, size_t{64}})
    for (size_t room : {size_t{1}, size_t{7}, size_t{1024}}) {
      const Parsed beast = parse<BeastParser>(input, piece, room);
      bool direct = false;
      Parsed ours = parse<ResponseParser>(input, piece, room, &direct);
      ours.fields = fuzz::groupedLikeBasicFields(ours.fields, [](const auto& f) { return std::get<1>(f); });
      EXPECT_EQ(ours, beast) << what << " piece=" << piece << " room=" << room;
      // A head split over reads is Beast's to read (its errors and limits depend on where it stops).
      if (piece == 1) {
        EXPECT_FALSE(direct) << what;
      }
      if (piece == 0) whole_direct = direct;
    }
  return whole_direct;
}

// Heads the direct reader reads (whole, in one piece): what engines send, and the edges of what it takes.
const std::string_view kReadDirectly[] = {
    // A JSON answer with a length, vLLM's fields and a repeated one.
    "HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 12:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 27\r\n"
    "content-type: application/json\r\nx-dup: a\r\nX-Dup: b\r\n\r\n{\"usage\":{\"prompt_tokens\":9}}",
    // A name repeated after others (Beast would group the two).
    "HTTP/1.1 200 OK\r\nx-dup: a\r\ncontent-length: 0\r\nserver: s\r\nX-DUP: b\r\n\r\n",
    // A chunked SSE stream with a chunk extension and a trailer (the chunks are Beast's to frame).
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n"
    "Connection: keep-alive\r\n\r\n"
    "10;ext=1\r\ndata: {\"a\":1}\n\n\r\n0E\r\ndata: [DONE]\n\n\r\n0\r\nx-trailer: t\r\n\r\n",
    // A body delimited by the connection's end; an unknown field; an empty value.
    "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nX-Unknown-Thing:\r\nconnection: close\r\n\r\n{\"id\":1}",
    // HTTP/1.0 kept alive with a length; a length with leading zeros and spaces around it.
    "HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length:  0005 \r\n\r\nhello",
    // No body: 204 and 304 with a stray length; a 100 Continue (the final answer would follow).
    "HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n",
    "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n",
    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    // A length too short for the bytes; a bad chunk size after a good head (Beast's chunk framing fails it).
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    // A status Beast knows no name for, a 503 with a body, an empty reason.
    "HTTP/1.1 599 Whatever\r\nContent-Length: 2\r\n\r\nok",
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 17\r\n\r\n"
    "{\"error\":\"full\"}\n",
    "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
    // A tab and obs-text inside a value, white space after it; a reason with a tab and obs-text; long values.
    "HTTP/1.1 200 O\tK\xe9\r\nX-T: a\tb\xff c\r\nX-W: v \t \r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-Long: 0123456789abcdef0123456789abcdef0123456789abcdef\r\nX-Sixteen: 0123456789abcdef\r\n"
    "Content-Length: 1\r\n\r\n!",
};

// Heads left to Beast's parser (from their first byte): errors, and forms the direct reader does not take.
const std::string_view kReadByBeast[] = {
    // Conflicting lengths, the same length twice, a length and chunked, a 20-digit length (above the body limit).
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Length: 12345678901234567890\r\n\r\nabc",
    "HTTP/1.1 200 OK\r\nContent-Length: 1,1\r\n\r\na",
    // Lists: a Connection with two tokens, a Transfer-Encoding other than chunked alone.
    "HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n",
    // (its body a bad chunk size: with a last chunk here, Beast 1.81's own parser trips one of its debug assertions,
    // parse_chunk_header's n >= 5, in some splits: the comparison parser, in the ASan build's Debug mode)
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\nzz\r\n",
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc",
    // A bad status line, a field without a colon, a head cut off, obs-fold, a bare LF, DEL, an unknown version.
    "HTTP/1.1 2000 OK\r\n\r\n",
    "HTTP/1.1 200 OK\r\nNoColonHere\r\n\r\n",
    "HTTP/1.1 200 OK\r\nContent-Type: applic",
    "HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-B: a\nb\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-D: a\x7f\r\nContent-Length: 0\r\n\r\n",
    "HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    "http/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\n X-Lead: a\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 200 OK\r\nX-CR: a\rb\r\nContent-Length: 0\r\n\r\n",
};

TEST(ResponseParser, ReadsEveryCaseAsBeastsBufferBodyParserDoes) {
  for (std::string_view c : kReadDirectly)
    EXPECT_TRUE(expectSameAsBeast(c, std::string(c))) << "not read directly: " << c;
  for (std::string_view c : kReadByBeast)
    EXPECT_FALSE(expectSameAsBeast(c, std::string(c))) << "read directly: " << c;
}

// A head larger than the head limit is Beast's (header_limit); one that fits is read directly, one that fits only
// counting its status line (Beast applies the limit to the fields) too is Beast's to accept.
TEST(ResponseParser, LeavesHeadsBeyondTheLimitToBeast) {
  const std::string big = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(9000, 'a') + "\r\nContent-Length: 0\r\n\r\n";
  EXPECT_FALSE(expectSameAsBeast(big, "9000-byte value"));
  const std::string near = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(8160, 'a') + "\r\nContent-Length: 0\r\n\r\n";
  EXPECT_FALSE(expectSameAsBeast(near, "head just over 8192 bytes"));
  const std::string fits = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(8000, 'a') + "\r\nContent-Length: 0\r\n\r\n";
  EXPECT_TRUE(expectSameAsBeast(fits, "head under 8192 bytes"));
}

// The fuzz target's seeds (tests/fuzz/corpus/upstream_response: one control byte, then the engine's bytes).
TEST(ResponseParser, ReadsTheFuzzSeedsAsBeastsBufferBodyParserDoes) {
  const size_t seeds = test_support::forEachFuzzSeed(
      "upstream_response", [](std::string_view bytes, const std::string& name) { expectSameAsBeast(bytes, name); });
  EXPECT_GE(seeds, 9u);
}

// The fields come out in the engine's order, a repeated name where it was repeated (Beast's basic_fields grouped
// it with its first occurrence: the same fields, in an order the relay no longer changes).
TEST(ResponseParser, KeepsTheEnginesOrderOfRepeatedNames) {
  ResponseParser parser;
  error_code ec;
  parser.put(boost::asio::buffer(std::string_view(
                 "HTTP/1.1 200 OK\r\nset-cookie: a=1\r\ncontent-length: 0\r\nSet-Cookie: b=2\r\n\r\n")),
             ec);
  ASSERT_FALSE(ec) << ec.message();
  std::vector<std::string> order;
  for (const auto& f : parser.get()) order.push_back(std::string(f.name_string()) + "=" + std::string(f.value()));
  EXPECT_EQ(order, (std::vector<std::string>{"set-cookie=a=1", "content-length=0", "Set-Cookie=b=2"}));
}

TEST(ResponseParser, LooksUpTheFirstFieldByCodeAndKeepsTheHeadsOrder) {
  ResponseParser parser;
  error_code ec;
  const std::string head =
      "HTTP/1.1 201 Created\r\nX-A: 1\r\ncontent-type: text/plain\r\nContent-Type: application/json\r\n"
      "Content-Length: 0\r\n\r\n";
  parser.put(boost::asio::buffer(head), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(parser.is_done());
  const ResponseHead& h = parser.get();
  EXPECT_EQ(h.result_int(), 201u);
  EXPECT_EQ(h.result(), http::status::created);
  EXPECT_EQ(h[http::field::content_type], "text/plain");
  EXPECT_EQ(h[http::field::server], "");
  ASSERT_EQ(h.fieldCount(), 4u);
  EXPECT_EQ(h.at(0).name(), http::field::unknown);
  EXPECT_EQ(h.at(0).name_string(), "X-A");
  EXPECT_EQ(h.at(2).name_string(), "Content-Type");
  EXPECT_EQ(h.at(2).value(), "application/json");
}

// The direct reader names the fields the relay acts on as Beast's string_to_field does, whatever their case, and no
// other name: every name Beast knows, as written, in lower and in upper case.
TEST(ResponseParser, NamesTheRelaysFieldsAsBeastDoes) {
  size_t relay_codes = 0;
  for (unsigned i = 1; i <= static_cast<unsigned>(http::field::xref); ++i) {
    const auto code = static_cast<http::field>(i);
    for (const std::string& n : test_support::caseVariants(http::to_string(code)))
      EXPECT_EQ(relayFieldCode(std::string_view(n)), relayFieldCode(http::string_to_field(n))) << n;
    if (relayFieldCode(code) != http::field::unknown) ++relay_codes;
  }
  EXPECT_EQ(relay_codes, 11u);
  EXPECT_EQ(relayFieldCode(std::string_view("content-lengths")), http::field::unknown);
  EXPECT_EQ(relayFieldCode(std::string_view("x-ontent-length")), http::field::unknown);
}

}  // namespace
}  // namespace prefixgate::proxy
