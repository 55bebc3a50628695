// libFuzzer target for an engine's response as the relay reads it: arbitrary bytes, delivered in pieces, into the
// relay's response parser (proxy/response_parser.h) set up as proxy/relay.cpp sets it up (head limit; the body read
// with read_some semantics through a small caller's buffer), the body bytes fed to proxy::UsageScanner in the pieces
// the reads give. Nothing may crash, leak, hang or trip a sanitizer; the scanner finds the same usage whatever the
// split (its contract), no more body bytes come out than the head announced, and Beast's response_parser with
// buffer_body (which the relay's parser replaced) reads the same head, body and ending from the same pieces. A head
// that comes whole in the first piece (control mode 0, and random cuts that happen to hold it) takes the relay
// parser's direct reader, any other Beast's parser inside it: both are compared.
// Build and run: scripts/fuzz.sh.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "basic_fields_order.h"
#include "fuzz_input.h"
#include "proxy/response_parser.h"
#include "proxy/upstream_attempt.h"
#include "proxy/usage_scanner.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using prefixgate::fuzz::check;

// The relay's head limit (proxy::kMaxResponseHeaderBytes); its body buffer (16 KiB in relay.cpp) is smaller here so
// that seeds of a few KiB already fill it and exercise need_buffer.
using prefixgate::proxy::kMaxResponseHeaderBytes;
constexpr size_t kRelayBufferBytes = 1024;

// One socket read: the next piece into the buffer; false at the end of the input (EOF).
bool readMore(beast::flat_buffer& buffer, prefixgate::fuzz::Pieces& pieces) {
  if (pieces.done()) return false;
  std::string_view piece = pieces.next();
  auto room = buffer.prepare(piece.size());
  buffer.commit(boost::asio::buffer_copy(room, boost::asio::buffer(piece.data(), piece.size())));
  return true;
}

// Beast's read_some on a parser (http/impl/read.hpp): parse what is buffered, read when more is needed, and at
// EOF finish a message that has begun (a body delimited by the connection's end).
template <class Parser>
beast::error_code readSome(Parser& parser, beast::flat_buffer& buffer, prefixgate::fuzz::Pieces& pieces) {
  beast::error_code ec;
  for (;;) {
    if (buffer.size() > 0) {
      const size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec != http::error::need_more) return ec;
      ec = {};
    }
    if (!readMore(buffer, pieces)) {
      if (!parser.got_some()) return http::error::end_of_stream;
      parser.put_eof(ec);
      return ec;
    }
  }
}

// What one parser made of the input: the head (status, fields in order), the body bytes and how reading ended.
struct Outcome {
  bool head_done = false;
  unsigned status = 0;
  std::vector<std::pair<std::string, std::string>> fields;
  std::string body;
  beast::error_code ec;
  bool done = false;
  bool operator==(const Outcome&) const = default;
};

template <class Parser>
Outcome readResponse(const prefixgate::fuzz::SplitInput& input, bool scan) {
  Outcome out;
  prefixgate::fuzz::Pieces pieces(input.control, input.payload);
  beast::flat_buffer buffer;
  Parser parser;
  parser.header_limit(kMaxResponseHeaderBytes);
  beast::error_code ec;
  // async_read_header: the head only.
  while (!parser.is_header_done()) {
    if (buffer.size() > 0) {
      buffer.consume(parser.put(buffer.data(), ec));
      if (ec && ec != http::error::need_more) {
        out.ec = ec;
        return out;
      }
      ec = {};
      if (parser.is_header_done()) break;
    }
    if (!readMore(buffer, pieces)) return out;
  }
  out.head_done = true;
  const auto length = parser.content_length();
  auto& head = parser.get();
  out.status = head.result_int();
  for (const auto& field : head) out.fields.emplace_back(field.name_string(), field.value());
  std::array<char, kRelayBufferBytes> body_buffer;
  // As for a Responses answer (every key family searched, the sequence number's too).
  prefixgate::proxy::UsageScanner split(true), whole(true);
  // Every read makes progress (consumes input or fills the buffer), so this bounds a loop that would spin.
  for (size_t reads = 0; !parser.is_done(); ++reads) {
    check(reads <= 2 * input.payload.size() + 8);
    head.body().data = body_buffer.data();
    head.body().size = body_buffer.size();
    ec = readSome(parser, buffer, pieces);
    if (ec == http::error::need_buffer) ec = {};
    const size_t got = body_buffer.size() - head.body().size;
    if (scan) split.feed(std::string_view(body_buffer.data(), got));
    out.body.append(body_buffer.data(), got);
    if (ec) break;
  }
  out.ec = ec;
  out.done = parser.is_done();
  check(!length || out.body.size() <= *length);
  if (scan) {
    whole.feed(out.body);
    check(split.outputTokens() == whole.outputTokens());
    check(split.promptTokens() == whole.promptTokens());
    check(split.cachedTokens() == whole.cachedTokens());
    check(split.lastSequenceNumber() == whole.lastSequenceNumber());
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto input = prefixgate::fuzz::splitInput(data, size);
  // The relay's parser, and Beast's response_parser<buffer_body> that it replaced: the same bytes in the same pieces
  // must give the same head, body and ending.
  Outcome relay = readResponse<prefixgate::proxy::ResponseParser>(input, true);
  const Outcome beast_parser = readResponse<http::response_parser<http::buffer_body>>(input, false);
  // The relay keeps the fields in the engine's order; Beast's basic_fields puts a repeated name right after its last
  // occurrence (same-name fields grouped, each group where its name first came). The same fields either way.
  relay.fields = prefixgate::fuzz::groupedLikeBasicFields(relay.fields, [](const auto& f) { return f.first; });
  check(relay == beast_parser);
  return 0;
}
