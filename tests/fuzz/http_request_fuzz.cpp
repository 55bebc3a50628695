// libFuzzer target for a client's request as the session reads it: raw bytes, delivered in pieces, into a Beast
// request parser set up as server/client_session.cpp sets it up (head limit and body limit from the default
// limits, head read lazily, body eagerly, keep-alive requests served one after another from the same buffer),
// then, for a parsed request to a proxied path, openai::parseRequest on its body. Nothing may crash, leak or trip
// a sanitizer; a body longer than the limit must never come through. Build and run: scripts/fuzz.sh.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "config/config.h"
#include "fuzz_input.h"
#include "openai/request.h"
#include "openai/responses_request.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using namespace prefixgate;

const config::LimitsConfig kLimits;
// The session serves this many requests of one connection at most per input (keep-alive, pipelined).
constexpr int kMaxRequestsPerInput = 4;

// The proxied paths (client_session.cpp's routeOf: POST only, the query string ignored).
std::optional<openai::Endpoint> proxiedEndpoint(const http::request<http::string_body>& req) {
  if (req.method() != http::verb::post) return std::nullopt;
  std::string_view target = req.target();
  std::string_view path = target.substr(0, target.find('?'));
  if (path == "/v1/chat/completions") return openai::Endpoint::kChatCompletions;
  if (path == "/v1/completions") return openai::Endpoint::kCompletions;
  if (path == "/v1/embeddings") return openai::Endpoint::kEmbeddings;
  if (path == "/v1/rerank" || path == "/v2/rerank") return openai::Endpoint::kRerank;
  if (path == "/v1/score") return openai::Endpoint::kScore;
  if (path == "/v1/messages") return openai::Endpoint::kMessages;
  if (path == "/v1/messages/count_tokens") return openai::Endpoint::kMessagesCountTokens;
  if (path == "/v1/responses") return openai::Endpoint::kResponses;
  return std::nullopt;
}

// Feeds the parser from `buffer`, topping it up from `pieces` as a socket read would, until `until` holds or
// an error (end of input included). Returns the error (none when `until` was reached).
template <class Until>
beast::error_code readUntil(http::request_parser<http::string_body>& parser, beast::flat_buffer& buffer,
                            prefixgate::fuzz::Pieces& pieces, Until until) {
  beast::error_code ec;
  while (!until()) {
    if (buffer.size() > 0) {
      size_t used = parser.put(buffer.data(), ec);
      buffer.consume(used);
      if (ec && ec != http::error::need_more) return ec;
      ec = {};
      if (used > 0 && !until()) continue;
      if (until()) break;
    }
    if (pieces.done()) {
      parser.put_eof(ec);
      return ec ? ec : beast::error_code(http::error::end_of_stream);
    }
    std::string_view piece = pieces.next();
    auto room = buffer.prepare(piece.size());
    buffer.commit(boost::asio::buffer_copy(room, boost::asio::buffer(piece.data(), piece.size())));
  }
  return ec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using prefixgate::fuzz::check;
  auto input = prefixgate::fuzz::splitInput(data, size);
  prefixgate::fuzz::Pieces pieces(input.control, input.payload);
  beast::flat_buffer buffer;
  for (int served = 0; served < kMaxRequestsPerInput; ++served) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(kLimits.max_header_bytes);
    parser.body_limit(kLimits.max_body_bytes);
    parser.eager(false);  // async_read_header stops at the end of the head
    if (readUntil(parser, buffer, pieces, [&] { return parser.is_header_done(); })) return 0;
    auto& head = parser.get();
    auto length = parser.content_length();
    if (length && *length > kLimits.max_body_bytes) return 0;  // 413
    // As the session does, but bounded: a fuzzer's 32 MiB announcement would only slow it down.
    if (length) head.body().reserve(std::min<uint64_t>(*length, 1 << 20) + openai::paddingBytes());
    parser.eager(true);  // async_read reads the body eagerly
    if (readUntil(parser, buffer, pieces, [&] { return parser.is_done(); })) return 0;
    check(head.body().size() <= kLimits.max_body_bytes);
    check(!length || head.body().size() == *length);
    if (auto endpoint = proxiedEndpoint(head)) {
      openai::RequestView view;
      auto error = openai::parseRequest(*endpoint, head.body(), true, kLimits.max_json_depth, view);
      check(!error || error.status == 400);
      check(error || !view.model.empty());
    }
    if (!head.keep_alive()) return 0;
  }
  return 0;
}
