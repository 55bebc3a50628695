// The session's request parser against Beast's request_parser<GrowingStringBody>, which it replaces: the same bytes
// in the same pieces, read as the session reads them (the head lazily, then the body eagerly), give the same method,
// target, version, fields in the same order with the same codes, the same framing, the same body and the same bytes
// consumed (a pipelined request's first byte stays in the buffer), or fail with the same error. Whole plain heads are
// read by the parser's direct reader, every other one by Beast's parser inside it: both paths are compared, and which
// one read each head is checked.
#include "server/request_parser.h"

#include <gtest/gtest.h>

#include <boost/beast/http.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "unit/core/parser_pieces.h"

namespace prefixgate::server {
namespace {

namespace http = boost::beast::http;
using boost::beast::error_code;

struct Parsed {
  error_code head_error, body_error;
  int verb = 0;
  std::string method, target;
  unsigned version = 0;
  std::vector<std::tuple<int, std::string, std::string>> fields;  // code, name, value
  std::optional<uint64_t> content_length;
  bool keep_alive = false, chunked = false, done = false;
  std::string body;
  size_t consumed = 0;  // bytes the parser took from the input
  std::vector<std::pair<uint64_t, std::string>> chunks;  // what the chunk check saw
  bool operator==(const Parsed&) const = default;
};

template <class Parser>
bool readDirectly(const Parser&) {
  return false;
}
bool readDirectly(const RequestParser& parser) { return parser.headReadDirectly(); }

std::ostream& operator<<(std::ostream& os, const Parsed& p) {
  os << "head_error=" << p.head_error.message() << " body_error=" << p.body_error.message() << " method=" << p.method
     << " target=" << p.target << " version=" << p.version << " fields=[";
  for (const auto& [code, name, value] : p.fields) os << code << ":" << name << "=" << value << ";";
  return os << "] length=" << (p.content_length ? std::to_string(*p.content_length) : "none")
            << " chunked=" << p.chunked << " done=" << p.done << " body=" << p.body.size()
            << " bytes consumed=" << p.consumed << " chunks=" << p.chunks.size();
}

// The chunk check of the session (it fails a chunk whose extensions are longer than a limit), recording each call.
struct RecordingCheck {
  std::vector<std::pair<uint64_t, std::string>>* seen;
  void operator()(uint64_t size, std::string_view extensions, error_code& ec) const {
    seen->emplace_back(size, std::string(extensions));
    if (extensions.size() > 8) ec = http::error::bad_chunk_extension;
  }
};

// Feeds `input` in pieces of `piece` bytes (0: whole) as reads would: the head, then (eager) the body.
template <class Parser>
Parsed parse(std::string_view input, size_t piece, uint32_t header_limit, bool* direct = nullptr) {
  Parsed out;
  RecordingCheck check{&out.chunks};
  Parser parser;
  parser.header_limit(header_limit);
  parser.body_limit(1 << 20);
  parser.on_chunk_header(check);
  test_support::PieceFeeder feed(input, piece);
  auto readSome = [&] { return feed.readSome(parser); };
  while (!parser.is_header_done()) {
    out.head_error = readSome();
    if (out.head_error) {
      out.consumed = feed.consumed();
      // Beast's parser calls on_request before it fails a head on its fields: the session names the error's shape
      // from the method and target it has then (a length over the limit).
      out.method = std::string(parser.get().method_string());
      out.target = std::string(parser.get().target());
      return out;
    }
  }
  auto& message = parser.get();
  out.verb = static_cast<int>(message.method());
  out.method = std::string(message.method_string());
  out.target = std::string(message.target());
  out.version = message.version();
  for (const auto& f : message)
    out.fields.emplace_back(static_cast<int>(f.name()), std::string(f.name_string()), std::string(f.value()));
  if (const auto length = parser.content_length()) out.content_length = *length;
  out.keep_alive = message.keep_alive();
  out.chunked = parser.chunked();
  if (direct) *direct = readDirectly(parser);
  parser.eager(true);
  for (size_t reads = 0; !parser.is_done() && reads < 100000; ++reads) {
    if (error_code ec = readSome()) {
      out.body_error = ec;
      break;
    }
  }
  out.body = message.body();
  out.done = parser.is_done();
  out.consumed = feed.consumed();
  // Trailers came after the head's fields (the session drops them): compared too.
  out.fields.clear();
  for (const auto& f : message)
    out.fields.emplace_back(static_cast<int>(f.name()), std::string(f.name_string()), std::string(f.value()));
  return out;
}

using BeastParser = http::request_parser<GrowingStringBody, util::RecyclingAllocator<char>>;

// Compares the two on `input` in pieces of several sizes; true when the whole input (one piece) was read directly.
bool expectSameAsBeast(std::string_view input, const std::string& what, uint32_t header_limit = 8192) {
  bool whole_direct = false;
  for (size_t piece : {size_t{0}, size_t{1}, size_t{3}, size_t{64}}) {
    const Parsed beast = parse<BeastParser>(input, piece, header_limit);
    bool direct = false;
    const Parsed ours = parse<RequestParser>(input, piece, header_limit, &direct);
    EXPECT_EQ(ours, beast) << what << " piece=" << piece;
    // A head split over reads is Beast's to read (its errors and limits depend on where it stops).
    if (piece == 1) {
      EXPECT_FALSE(direct) << what;
    }
    if (piece == 0) whole_direct = direct;
  }
  return whole_direct;
}

// Heads the direct reader reads (whole, in one piece): what clients send, and the edges of what it takes.
const std::string_view kReadDirectly[] = {
    // An OpenAI SDK's request; the next request pipelined behind it (it must stay unread).
    "POST /v1/chat/completions HTTP/1.1\r\nHost: gw:8080\r\nAccept-Encoding: gzip, deflate\r\n"
    "Connection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\n"
    "User-Agent: OpenAI/Python 1.54.0\r\nAuthorization: Bearer sk-1\r\nContent-Length: 17\r\n\r\n"
    "{\"model\":\"m\"}\r\n\r\nPOST /v1/completions HTTP/1.1\r\n",
    // wrk's request, the names in other cases, a repeated name (basic_fields groups it), an unknown one.
    "POST /v1/completions?x=1 HTTP/1.1\r\nHOST: h\r\ncontent-type: a/b\r\nX-Dup: 1\r\ncontent-length: 2\r\n"
    "x-dup: 2\r\nx-request-id: r-1\r\n\r\n{}",
    // No body: GET, HEAD, DELETE; a length of 0; HTTP/1.0 kept alive, and closed.
    "GET /v1/models HTTP/1.1\r\nHost: h\r\n\r\n",
    "HEAD /v1/models HTTP/1.1\r\nHost: h\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    "DELETE /v1/responses/resp_1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    "POST /v1/chat/completions HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length:  0005 \r\n\r\nhello",
    "GET /health HTTP/1.0\r\n\r\n",
    "GET /a HTTP/1.1\r\nconnection: close\r\n\r\n",
    // A chunked body with an extension and a trailer; one whose extension the chunk check refuses; a bad chunk size.
    "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n"
    "3;e=1\r\n{\"a\r\n2\r\n\":\r\n2\r\n1}\r\n0\r\nX-Trailer: t\r\n\r\n",
    "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n3;extension=long\r\nabc\r\n0\r\n\r\n",
    "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
    // A body shorter than its length (cut off), Expect, a target with obs-text and '%', a tab and obs-text in a value.
    "POST /v1/completions HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc",
    "POST /v1/completions HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx",
    "GET /v1/models/\xe9%20a HTTP/1.1\r\nX-T: a\tb\xff c\r\nX-W: v \t \r\nX-E:\r\n\r\n",
    // Every method Beast knows by name takes this path; a long target and values (the SSE scans).
    "OPTIONS * HTTP/1.1\r\n\r\n",
    "PUT /0123456789abcdef0123456789abcdef0123456789abcdef HTTP/1.1\r\n"
    "X-Long: 0123456789abcdef0123456789abcdef0123456789abcdef\r\nContent-Length: 1\r\n\r\n!",
};

// Heads left to Beast's parser (from their first byte): errors, and forms the direct reader does not take.
const std::string_view kReadByBeast[] = {
    // A method Beast does not know (a lowercase one included), an empty target, another version, a space too many.
    "FETCH /v1/models HTTP/1.1\r\n\r\n",
    "post /v1/chat/completions HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    "POST  HTTP/1.1\r\n\r\n",
    "POST /a HTTP/2.0\r\n\r\n",
    "POST /a HTTP/1.1 \r\n\r\n",
    "POST /a\tb HTTP/1.1\r\n\r\n",
    "\r\nPOST /a HTTP/1.1\r\n\r\n",
    // Conflicting lengths, the same length twice, a list, a length and chunked, a 20-digit length, over the limit.
    "POST /a HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    "POST /a HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    "POST /a HTTP/1.1\r\nContent-Length: 1,1\r\n\r\na",
    "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "POST /a HTTP/1.1\r\nContent-Length: 12345678901234567890\r\n\r\nabc",
    "POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1048577\r\n\r\nabc",
    // Transfer-Encoding other than chunked alone, chunked in HTTP/1.0; Connection lists, upgrades.
    "POST /a HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\nzz\r\n",
    "POST /a HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    "POST /a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n",
    "POST /a HTTP/1.1\r\nConnection: keep-alive, close\r\nContent-Length: 0\r\n\r\n",
    "GET /a HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "GET /a HTTP/1.1\r\nUpgrade: h2c\r\n\r\n",
    // A field without a colon, a space before the colon, a head cut off, obs-fold, a bare LF, DEL, a CR, a lead space.
    "POST /a HTTP/1.1\r\nNoColonHere\r\n\r\n",
    "POST /a HTTP/1.1\r\nHost : h\r\n\r\n",
    "POST /a HTTP/1.1\r\nContent-Type: applic",
    "POST /a HTTP/1.1\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
    "POST /a HTTP/1.1\r\nX-B: a\nb\r\nContent-Length: 0\r\n\r\n",
    "POST /a HTTP/1.1\r\nX-D: a\x7f\r\nContent-Length: 0\r\n\r\n",
    "POST /a HTTP/1.1\r\nX-CR: a\rb\r\nContent-Length: 0\r\n\r\n",
    "POST /a HTTP/1.1\r\n X-Lead: a\r\nContent-Length: 0\r\n\r\n",
};

TEST(RequestParser, ReadsEveryCaseAsBeastsRequestParserDoes) {
  for (std::string_view c : kReadDirectly)
    EXPECT_TRUE(expectSameAsBeast(c, std::string(c))) << "not read directly: " << c;
  for (std::string_view c : kReadByBeast)
    EXPECT_FALSE(expectSameAsBeast(c, std::string(c))) << "read directly: " << c;
}

// More fields than the direct reader holds: Beast's to read (and it reads them all).
TEST(RequestParser, LeavesHeadsWithManyFieldsToBeast) {
  std::string many = "POST /a HTTP/1.1\r\n";
  for (int i = 0; i < 40; ++i) many += "X-F" + std::to_string(i) + ": " + std::to_string(i) + "\r\n";
  EXPECT_FALSE(expectSameAsBeast(many + "Content-Length: 1\r\n\r\n!", "41 fields"));
  std::string some = "POST /a HTTP/1.1\r\n";
  for (int i = 0; i < 31; ++i) some += "X-F" + std::to_string(i) + ": " + std::to_string(i) + "\r\n";
  EXPECT_TRUE(expectSameAsBeast(some + "Content-Length: 1\r\n\r\n!", "32 fields"));
}

// A head larger than the head limit is Beast's (header_limit); one that fits is read directly, one that fits only
// counting its request line (Beast applies the limit to the fields) too is Beast's to accept.
TEST(RequestParser, LeavesHeadsBeyondTheLimitToBeast) {
  const std::string big = "POST /a HTTP/1.1\r\nX-Big: " + std::string(9000, 'a') + "\r\nContent-Length: 0\r\n\r\n";
  EXPECT_FALSE(expectSameAsBeast(big, "9000-byte value"));
  const std::string near = "POST /a HTTP/1.1\r\nX-Big: " + std::string(8160, 'a') + "\r\nContent-Length: 0\r\n\r\n";
  EXPECT_FALSE(expectSameAsBeast(near, "head just over 8192 bytes"));
  const std::string fits = "POST /a HTTP/1.1\r\nX-Big: " + std::string(8000, 'a') + "\r\nContent-Length: 0\r\n\r\n";
  EXPECT_TRUE(expectSameAsBeast(fits, "head under 8192 bytes"));
  const std::string exact = "GET /a HTTP/1.1\r\nX: " + std::string(64 - 24, 'a') + "\r\n\r\n";
  ASSERT_EQ(exact.size(), 64u);
  EXPECT_TRUE(expectSameAsBeast(exact, "a head of exactly header_limit bytes", 64));
  EXPECT_FALSE(expectSameAsBeast(exact, "a head one byte over header_limit", 63));
}

// The fuzz target's seeds (tests/fuzz/corpus/http_request: one control byte, then the client's bytes).
TEST(RequestParser, ReadsTheFuzzSeedsAsBeastsRequestParserDoes) {
  const size_t seeds = test_support::forEachFuzzSeed(
      "http_request", [](std::string_view bytes, const std::string& name) { expectSameAsBeast(bytes, name); });
  EXPECT_GE(seeds, 5u);
}

// The direct reader's field codes are Beast's string_to_field for every name Beast knows, as written, in lower and in
// upper case, and unknown for names that are not.
TEST(RequestParser, NamesFieldsAsBeastDoes) {
  for (unsigned i = 1; i <= static_cast<unsigned>(http::field::xref); ++i) {
    for (const std::string& n : test_support::caseVariants(http::to_string(static_cast<http::field>(i))))
      EXPECT_EQ(requestFieldCode(n), http::string_to_field(n)) << n;
  }
  for (std::string_view n : {"hosts", "hos", "x-host", "content-lengths", "x-ontent-length", "authorizatio"})
    EXPECT_EQ(requestFieldCode(n), http::string_to_field({n.data(), n.size()})) << n;
}

// The direct reader took the usual request: the head and its body in one put, nothing left, the body whole.
TEST(RequestParser, ReadsAWholeRequestInOnePutWhenEager) {
  RequestParser parser;
  parser.eager(true);
  const std::string_view input =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n{\"model\":1}GET";
  error_code ec;
  const size_t used = parser.put(boost::asio::buffer(input.data(), input.size()), ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_TRUE(parser.headReadDirectly());
  EXPECT_TRUE(parser.is_done());
  EXPECT_EQ(used, input.size() - 3);
  EXPECT_EQ(parser.get().body(), "{\"model\":1}");
  EXPECT_EQ(parser.get().method(), http::verb::post);
  EXPECT_EQ(parser.get()[http::field::host], "h");
  parser.put(boost::asio::buffer(input.data() + used, 3), ec);
  EXPECT_EQ(ec, http::error::stale_parser);
}

}  // namespace
}  // namespace prefixgate::server
