// libFuzzer target for a client's request as the session reads it: raw bytes, delivered in pieces, into the session's
// request parser (server/request_parser.h) set up as server/client_session.cpp sets it up (head limit and body limit
// from the default limits, the chunk-extension check, head read lazily, body eagerly, keep-alive requests served one
// after another from the same buffer), then, for a parsed request to a proxied path, openai::parseRequest on its
// body. Nothing may crash, leak or trip a sanitizer; a body longer than the limit must never come through; and Beast's
// request_parser with the same body type (which the session's parser replaced) reads the same heads, fields, bodies,
// bytes and errors from the same pieces. A head that comes whole in one piece takes the session parser's direct
// reader, any other Beast's parser inside it: both are compared. Build and run: scripts/fuzz.sh.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.h"
#include "fuzz_input.h"
#include "openai/request.h"
#include "openai/responses_request.h"
#include "server/request_parser.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using namespace prefixgate;

const config::LimitsConfig kLimits;
// The session serves this many requests of one connection at most per input (keep-alive, pipelined).
constexpr int kMaxRequestsPerInput = 4;

// The proxied paths (client_session.cpp's routeOf: POST only, the query string ignored).
std::optional<openai::Endpoint> proxiedEndpoint(http::verb method, std::string_view target) {
  if (method != http::verb::post) return std::nullopt;
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

// The chunk check of the session (client_session.cpp's ChunkCheck): extensions over the limit fail the body.
constexpr size_t kMaxChunkExtensionBytes = 4096;
struct ChunkCheck {
  void operator()(uint64_t, std::string_view extensions, beast::error_code& ec) const {
    if (extensions.size() > kMaxChunkExtensionBytes) ec = http::error::bad_chunk_extension;
  }
};

// One request as a parser read it, for the comparison.
struct Served {
  beast::error_code head_error, body_error;
  std::string method, target;
  unsigned version = 0;
  std::vector<std::tuple<int, std::string, std::string>> fields;
  std::optional<uint64_t> content_length;
  bool chunked = false, keep_alive = false, done = false;
  std::string body;
  size_t consumed = 0;
  bool operator==(const Served&) const = default;
};

// One connection's bytes, read by one kind of parser as the session reads them.
template <class Parser>
class Reader {
 public:
  Reader(uint8_t control, std::string_view payload) : pieces_(control, payload) {}

  // Reads the next request; false when the connection would end (an error, the end of the input, no keep-alive).
  bool serve(Served& out) {
    Parser parser;
    parser.header_limit(kLimits.max_header_bytes);
    parser.body_limit(kLimits.max_body_bytes);
    parser.on_chunk_header(check_);
    parser.eager(false);  // the head first, as the session reads it
    out.head_error = readUntil(parser, out, [&] { return parser.is_header_done(); });
    auto& message = parser.get();
    if (out.head_error) return false;
    out.method = std::string(message.method_string());
    out.target = std::string(message.target());
    out.version = message.version();
    const auto length = parser.content_length();
    if (length) out.content_length = *length;
    out.chunked = parser.chunked();
    out.keep_alive = message.keep_alive();
    if (length && *length > kLimits.max_body_bytes) return false;  // 413
    // As the session does, but bounded: a fuzzer's 32 MiB announcement would only slow it down.
    if (length) message.body().reserve(std::min<uint64_t>(*length, 1 << 20) + openai::paddingBytes());
    parser.eager(true);  // the body eagerly
    out.body_error = readUntil(parser, out, [&] { return parser.is_done(); });
    for (const auto& f : message)
      out.fields.emplace_back(static_cast<int>(f.name()), std::string(f.name_string()), std::string(f.value()));
    out.body = message.body();
    out.done = parser.is_done();
    if (out.body_error) return false;
    prefixgate::fuzz::check(out.body.size() <= kLimits.max_body_bytes);
    prefixgate::fuzz::check(!length || out.body.size() == *length);
    if (auto endpoint = proxiedEndpoint(message.method(), message.target())) {
      openai::RequestView view;
      auto error = openai::parseRequest(*endpoint, message.body(), true, kLimits.max_json_depth, view);
      prefixgate::fuzz::check(!error || error.status == 400);
      prefixgate::fuzz::check(error || !view.model.empty());
    }
    return out.keep_alive;
  }

 private:
  // Feeds the parser from the buffer, topping it up from the pieces as a socket read would, until `until` holds or
  // an error (end of input included). Returns the error (none when `until` was reached).
  template <class Until>
  beast::error_code readUntil(Parser& parser, Served& out, Until until) {
    beast::error_code ec;
    while (!until()) {
      if (buffer_.size() > 0) {
        const size_t used = parser.put(buffer_.data(), ec);
        buffer_.consume(used);
        out.consumed += used;
        if (ec && ec != http::error::need_more) return ec;
        ec = {};
        if (used > 0 && !until()) continue;
        if (until()) break;
      }
      if (pieces_.done()) {
        if (!parser.got_some()) return http::error::end_of_stream;
        parser.put_eof(ec);
        return ec ? ec : beast::error_code(http::error::end_of_stream);
      }
      std::string_view piece = pieces_.next();
      auto room = buffer_.prepare(piece.size());
      buffer_.commit(boost::asio::buffer_copy(room, boost::asio::buffer(piece.data(), piece.size())));
    }
    return ec;
  }

  prefixgate::fuzz::Pieces pieces_;
  beast::flat_buffer buffer_;
  ChunkCheck check_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto input = prefixgate::fuzz::splitInput(data, size);
  Reader<prefixgate::server::RequestParser> ours(input.control, input.payload);
  using BeastParser =
      http::request_parser<prefixgate::server::GrowingStringBody, prefixgate::util::RecyclingAllocator<char>>;
  Reader<BeastParser> beasts(input.control, input.payload);
  for (int served = 0; served < kMaxRequestsPerInput; ++served) {
    Served a, b;
    const bool more = ours.serve(a);
    const bool beast_more = beasts.serve(b);
    prefixgate::fuzz::check(a == b && more == beast_more);
    if (!more) break;
  }
  return 0;
}
