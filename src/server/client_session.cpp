// One client connection: read each request (limits, timeouts), answer it or proxy it, keep the connection alive.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <nlohmann/json.hpp>

#include "net/drained_reads.h"
#include "net/ready_io.h"
#include "openai/request.h"
#include "openai/responses_request.h"
#include "proxy/pd_protocol.h"
#include "proxy/pod_health.h"
#include "proxy/relay.h"
#include "server/client_auth.h"
#include "server/request_body.h"
#include "server/request_parser.h"
#include "server/request_preparation.h"
#include "server/request_outcome.h"
#include "server/responses.h"
#include "server/worker.h"
#include "util/log.h"

namespace prefixgate::server {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr auto kAwait = asio::use_awaitable;
constexpr size_t kFirstReadBytes = 4096;
// The most one read of a request head takes from the socket (Beast's http::async_read_header reads as much).
constexpr size_t kHeadReadBytes = 64 * 1024;
// The session buffer holds at most a request head and one read beyond it: a chunk-size line, its extensions or a
// trailer section longer than that fails the request (431) instead of growing the buffer without end.
constexpr size_t kBufferSlackBytes = 64 * 1024;
constexpr size_t kMaxChunkExtensionBytes = 4096;
constexpr auto kErrorWriteTimeout = std::chrono::seconds(5);
// After a refusal that left the client's body unread (see discardUnread), what the client still sends is read and
// dropped for at most this long, and at most this much, before the connection closes.
constexpr auto kLingerTimeout = std::chrono::seconds(2);
constexpr size_t kLingerMaxBytes = 1024 * 1024;
constexpr size_t kLingerReadBytes = 4096;
// The most one read of a chunked body takes from the socket (the session buffer's room bounds it too).
constexpr size_t kChunkedReadBytes = 64 * 1024;
using openai::GatewayError;

// Transfer-Encoding is accepted only as one final "chunked" (RFC 9112 6.1): anything else (gzip, a doubled
// chunked, chunked not last) would leave the body's end ambiguous between the gateway and the engine.
bool acceptableTransferEncoding(const proxy::ClientHead& head) {
  auto it = head.find(http::field::transfer_encoding);
  if (it == head.end()) return true;
  if (head.count(http::field::transfer_encoding) != 1 || head.version() != 11) return false;
  http::token_list list(it->value());
  auto token = list.begin();
  return token != list.end() && beast::iequals(*token, "chunked") && ++token == list.end();
}

struct Route {
  // kResponseById: GET/DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel (sent to the pod that made {id}).
  enum Kind { kProxy, kModels, kResponseById, kNotFound, kMethodNotAllowed } kind = kNotFound;
  openai::Endpoint endpoint = openai::Endpoint::kChatCompletions;
  const char* allow = "";
};

constexpr std::string_view kResponsesPrefix = "/v1/responses/";
constexpr std::string_view kCancelSuffix = "/cancel";

// The {id} of a /v1/responses/{id}[/cancel] path (unchecked: see openai::validResponseId).
std::string_view responseIdOf(std::string_view target) {
  std::string_view id = target.substr(0, target.find('?')).substr(kResponsesPrefix.size());
  if (id.ends_with(kCancelSuffix)) id.remove_suffix(kCancelSuffix.size());
  return id;
}

Route routeOf(http::verb method, std::string_view target) {
  std::string_view path = target.substr(0, target.find('?'));
  if (path.starts_with(kResponsesPrefix) && path.size() > kResponsesPrefix.size()) {
    const bool cancel = path.ends_with(kCancelSuffix);
    Route r{Route::kResponseById, openai::Endpoint::kResponses, cancel ? "POST" : "GET, DELETE"};
    const bool allowed = cancel ? method == http::verb::post : method == http::verb::get || method == http::verb::delete_;
    if (!allowed) r.kind = Route::kMethodNotAllowed;
    return r;
  }
  struct Entry {
    std::string_view path;
    http::verb method;
    Route route;
  };
  static const Entry kEntries[] = {
      {"/v1/chat/completions", http::verb::post, {Route::kProxy, openai::Endpoint::kChatCompletions, "POST"}},
      {"/v1/completions", http::verb::post, {Route::kProxy, openai::Endpoint::kCompletions, "POST"}},
      {"/v1/embeddings", http::verb::post, {Route::kProxy, openai::Endpoint::kEmbeddings, "POST"}},
      {"/v1/rerank", http::verb::post, {Route::kProxy, openai::Endpoint::kRerank, "POST"}},
      {"/v2/rerank", http::verb::post, {Route::kProxy, openai::Endpoint::kRerank, "POST"}},
      {"/v1/score", http::verb::post, {Route::kProxy, openai::Endpoint::kScore, "POST"}},
      {"/v1/responses", http::verb::post, {Route::kProxy, openai::Endpoint::kResponses, "POST"}},
      {"/v1/messages", http::verb::post, {Route::kProxy, openai::Endpoint::kMessages, "POST"}},
      {"/v1/messages/count_tokens", http::verb::post, {Route::kProxy, openai::Endpoint::kMessagesCountTokens, "POST"}},
      {"/v1/models", http::verb::get, {Route::kModels, openai::Endpoint::kChatCompletions, "GET"}},
  };
  for (const Entry& e : kEntries) {
    if (e.path != path) continue;
    if (e.method == method || (e.method == http::verb::get && method == http::verb::head)) return e.route;
    Route r = e.route;  // its endpoint kept: the answer takes the endpoint's error shape
    r.kind = Route::kMethodNotAllowed;
    return r;
  }
  return Route{};
}

// Anthropic's paths answer every error of theirs in Anthropic's shape (the same table: openai/errors.h); the
// Responses API's streams end in their own error event.
openai::ErrorShape errorShapeOf(const Route& route) {
  if (route.kind == Route::kNotFound) return openai::ErrorShape::kOpenAI;
  if (openai::isAnthropic(route.endpoint)) return openai::ErrorShape::kAnthropic;
  return route.endpoint == openai::Endpoint::kResponses ? openai::ErrorShape::kResponses : openai::ErrorShape::kOpenAI;
}

std::string modelsBody(const discovery::PodSet& pods, int64_t now_ms, const ClientAuth& auth) {
  nlohmann::json data = nlohmann::json::array();
  for (const std::string& model : pods.models()) {
    if (!auth.allows(model)) continue;
    const auto* serving = pods.podsFor(model);
    bool ready = serving && std::any_of(serving->begin(), serving->end(), [&](const auto& p) { return p->ready(now_ms); });
    if (ready) data.push_back({{"id", model}, {"object", "model"}, {"created", 0}, {"owned_by", "prefixgate"}});
  }
  return nlohmann::json{{"object", "list"}, {"data", data}}.dump();
}

// Counts a request under its API key's name (ClientAuth::countRequest) when it ends, with its final status.
struct KeyCount {
  const ClientAuth& auth;
  const RequestOutcome& outcome;
  ~KeyCount() { auth.countRequest(outcome.status()); }
};

class ClientSession {
 public:
  ClientSession(Worker& worker, asio::ip::tcp::socket socket)
      : worker_(worker),
        services_(worker.services),
        preparation_(services_.preparation),
        limits_(services_.config.limits),
        stream_(std::move(socket)),
        head_timer_(stream_.get_executor()),
        idle_(stream_.socket()),
        buffer_(std::max<size_t>(limits_.max_header_bytes, kFirstReadBytes) + kBufferSlackBytes) {
    worker_.clients.emplace(&stream_, &waiting_);
  }
  ~ClientSession() { worker_.clients.erase(&stream_); }
  ClientSession(const ClientSession&) = delete;
  ClientSession& operator=(const ClientSession&) = delete;

  asio::awaitable<void> run() {
    while (co_await waitForRequest()) {
      if (!co_await serveOne()) break;
    }
    error_code ignored;
    stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
    if (unread_body_) co_await discardUnread();
    stream_.close();
  }

 private:
  // Waits (up to client_idle_timeout_ms) for the first bytes of the next request. The socket's own read under the
  // connection's deadline, not the stream's timeout, which would arm a timer and cancel it for every request.
  asio::awaitable<bool> waitForRequest() {
    if (buffer_.size() > 0) co_return true;
    if (services_.draining.load(std::memory_order_acquire)) co_return false;
    waiting_ = true;
    idle_.restart(std::chrono::milliseconds(limits_.client_idle_timeout_ms));
    error_code ec;
    size_t n = co_await stream_.socket().async_read_some(buffer_.prepare(kFirstReadBytes),
                                                         asio::redirect_error(kAwait, ec));
    idle_.pause();
    waiting_ = false;
    if (ec) co_return false;
    buffer_.commit(n);
    co_return true;
  }

  // Serves one request; returns whether the connection stays open for another.
  asio::awaitable<bool> serveOne() {
    request_.emplace(*this);
    const EndRequestOnExit end_request{request_};  // first: the request ends after everything below
    RequestOutcome& outcome = request_->outcome;
    BodyCharge& body_charge = request_->body_charge;
    RequestParser& parser = request_->parser;
    long_extension_ = false;
    parser.header_limit(limits_.max_header_bytes);
    parser.body_limit(limits_.max_body_bytes);
    parser.on_chunk_header(request_->check_chunk);
    error_code ec;
    // A head already read whole (the usual case: it came in one segment) is parsed at once, with no timer.
    stream_.expires_never();
    if (!net::parseBuffered(parser, buffer_, ec) || (!ec && !parser.is_header_done())) co_await readHead(parser, ec);
    // A Content-Length over the limit fails a complete head: its path still picks the error's shape.
    framing_.error_shape = ec == http::error::body_limit
                               ? errorShapeOf(routeOf(parser.get().method(), parser.get().target()))
                               : openai::ErrorShape::kOpenAI;
    if (ec) co_return co_await headerFailed(ec, outcome);
    auto& head = parser.get();
    outcome.begin(head);
    framing_ = Framing{head.version(), head.method() == http::verb::head};
    if (!acceptableTransferEncoding(head)) {
      co_await reject(outcome, GatewayError::kBadTransferEncoding,
                      "unsupported Transfer-Encoding '" + openai::printable(head[http::field::transfer_encoding], 64) +
                          "': only a single, final 'chunked' is accepted",
                      false);
      co_return false;
    }
    bool keep_alive = head.keep_alive() && !services_.draining.load(std::memory_order_acquire);
    if (parser.chunked()) head_fields_ = std::distance(head.begin(), head.end());  // trailers come after these
    Route route = routeOf(head.method(), head.target());
    framing_.error_shape = errorShapeOf(route);
    ClientAuth auth = preparation_.clientAuth();
    // The request counts under its key's name with its final status, however it ends.
    const KeyCount key_count{auth, outcome};
    if (route.kind == Route::kProxy || route.kind == Route::kModels || route.kind == Route::kResponseById) {
      if (auto refusal = auth.authenticate(head)) co_return co_await refuseOnHead(parser, outcome, *refusal, keep_alive);
      if (const std::string* key = auth.keyName()) outcome.setKey(*key);
    }
    if (route.kind == Route::kResponseById)
      co_return co_await serveResponseById(parser, body_charge, outcome, auth, keep_alive);
    if (route.kind != Route::kProxy)
      co_return co_await serveLocal(route, parser, body_charge, outcome, auth, keep_alive);
    co_return co_await serveProxy(route.endpoint, parser, body_charge, outcome, auth, keep_alive);
  }

  // A refused key is answered on the head, before a byte of the body is read: an unauthenticated client costs no
  // body memory. With a body to come, the 401 says `connection: close` and the connection closes after it
  // (discardUnread lets the client read the 401 first).
  asio::awaitable<bool> refuseOnHead(RequestParser& parser, RequestOutcome& outcome, const auth::Refusal& refusal,
                                     bool keep_alive) {
    stream_.expires_after(kErrorWriteTimeout);  // a client that reads nothing cannot hold the connection
    if (parser.is_done())
      co_return co_await writeRefusal(stream_, outcome, refusal, keep_alive, framing_) && keep_alive;
    unread_body_ = true;
    co_await writeRefusal(stream_, outcome, refusal, false, framing_);
    co_return false;
  }

  // After a refusal that left the client's body unread, with the send side shut: closing at once, with unread bytes,
  // makes the kernel reset the connection, which can destroy the answer before the client reads it. So what the
  // client still sends is read into a small fixed buffer and dropped (never kept: the body's memory is gone), up to
  // kLingerMaxBytes within kLingerTimeout, or until the client closes.
  asio::awaitable<void> discardUnread() {
    std::array<char, kLingerReadBytes> sink;
    stream_.expires_after(kLingerTimeout);
    size_t discarded = 0;
    error_code ec;
    while (!ec && discarded < kLingerMaxBytes)
      discarded += co_await stream_.async_read_some(asio::buffer(sink), asio::redirect_error(kAwait, ec));
  }

  // Reads the rest of the request head, within limits.header_timeout_ms.
  asio::awaitable<void> readHead(RequestParser& parser, error_code& ec) {
    // The head's deadline cancels the read instead of closing the socket (as the stream's own timeout would), so
    // the client can still be told why: a 408.
    head_timed_out_ = false;
    head_timer_.expires_after(std::chrono::milliseconds(limits_.header_timeout_ms));
    // The generation tells a wait that fired just as the head arrived (its handler already queued, so cancel()
    // cannot stop it) from the current one: only the current one may cancel the read.
    head_timer_.async_wait([this, generation = ++head_generation_](error_code timer_ec) {
      if (timer_ec || generation != head_generation_) return;
      head_timed_out_ = true;
      error_code ignored;
      stream_.socket().cancel(ignored);
    });
    // http::async_read_header's loop: parse what the buffer holds, else read into it (at most its room).
    while (!ec && !parser.is_header_done()) {
      if (net::parseBuffered(parser, buffer_, ec)) continue;  // it advanced, or failed
      const size_t size = beast::read_size(buffer_, kHeadReadBytes);
      if (size == 0) {
        ec = http::error::buffer_overflow;
        break;
      }
      const size_t n =
          co_await stream_.socket().async_read_some(buffer_.prepare(size), asio::redirect_error(kAwait, ec));
      buffer_.commit(n);
      if (ec == asio::error::eof) {
        // As Beast's read: the end of a started head is a partial message, of no head the end of the stream.
        if (parser.got_some())
          parser.put_eof(ec);
        else
          ec = http::error::end_of_stream;
      }
    }
    ++head_generation_;
    head_timer_.cancel();
    if (head_timed_out_) ec = beast::error::timeout;
  }

  // Writes a gateway error (openai/errors.h) and records it as the request's outcome; returns whether the
  // connection stays open.
  asio::awaitable<bool> reject(RequestOutcome& outcome, GatewayError error, std::string message, bool keep_alive,
                               HeaderList extra = {}, std::string_view param = {}) {
    outcome.fail(error, std::move(message));
    HeaderList headers = outcome.headers();
    for (auto& h : extra) headers.push_back(std::move(h));
    co_return co_await writeError(stream_, error, outcome.message(), keep_alive, headers, param, framing_) && keep_alive;
  }

  // A request its preparation refused (400, 403, 429, 404, 503...): the OpenAI-shaped error, with the key limit's
  // retry-after when it has one.
  asio::awaitable<bool> refusePrepared(RequestOutcome& outcome, PrepareRefusal& refusal, bool keep_alive) {
    HeaderList retry_after;
    if (refusal.retry_after_s > 0) retry_after.emplace_back("retry-after", std::to_string(refusal.retry_after_s));
    co_return co_await reject(outcome, refusal.error, std::move(refusal.message), keep_alive, std::move(retry_after),
                              refusal.param);
  }

  asio::awaitable<bool> headerFailed(const error_code& ec, RequestOutcome& outcome) {
    if (ec == http::error::end_of_stream || ec == asio::error::eof) co_return false;
    if (ec == http::error::body_limit) {
      // The head announced a Content-Length over the limit (Beast checks it with the head).
      co_await reject(outcome, GatewayError::kBodyTooLarge, bodyTooLarge(), false);
    } else if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      co_await reject(outcome, GatewayError::kHeaderTooLarge, "request header is larger than limits.max_header_bytes (" +
                                                                  std::to_string(limits_.max_header_bytes) + " bytes)",
                      false);
    } else if (ec == beast::error::timeout) {
      stream_.expires_after(kErrorWriteTimeout);  // a client that reads nothing cannot hold the connection
      co_await reject(outcome, GatewayError::kHeaderTimeout,
                      "request head not received within limits.header_timeout_ms (" +
                          std::to_string(limits_.header_timeout_ms) + " ms)",
                      false);
    } else if (ec == http::error::bad_transfer_encoding) {
      co_await reject(outcome, GatewayError::kBadTransferEncoding,
                      "Transfer-Encoding conflicts with Content-Length or is repeated", false);
    } else if (ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
      co_await reject(outcome, GatewayError::kMalformedHttp, "malformed HTTP request: " + ec.message(), false);
    }
    co_return false;
  }

  std::string bodyTooLarge() const {
    return "request body is larger than limits.max_body_bytes (" + std::to_string(limits_.max_body_bytes) + " bytes)";
  }

  // Reads the rest of the body; answers 413/431/400 (and 503 over limits.max_buffered_body_bytes) itself when it
  // cannot. Trailer fields of a chunked body are dropped: they are never forwarded to the engine as headers.
  asio::awaitable<bool> readBody(RequestParser& parser, BodyCharge& charge, RequestOutcome& outcome) {
    auto& head = parser.get();
    const auto length = parser.content_length();
    if (length && *length > limits_.max_body_bytes) {
      co_await reject(outcome, GatewayError::kBodyTooLarge, bodyTooLarge(), false);
      co_return false;
    }
    if (beast::iequals(head[http::field::expect], "100-continue")) {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      error_code ec;
      co_await asio::async_write(stream_, asio::buffer(kContinue), asio::redirect_error(kAwait, ec));
      if (ec) co_return false;
    }
    error_code ec;
    // The body's buffer grows up to the announced length (a chunked body: up to limits.max_body_bytes).
    const size_t limit = length ? static_cast<size_t>(*length) : static_cast<size_t>(limits_.max_body_bytes);
    // A body already read whole with the head is parsed at once; the rest is read under the idle timeout. A long
    // one's buffer is sized at once for what has arrived so far (here and in the kernel), not grown step by step
    // (each growth copies what was read before it).
    parser.eager(true);
    bool fits = true;
    if (length && !parser.chunked() && *length > kFirstBodyStepBytes && buffer_.size() < *length) {
      std::string& body = parser.get().body();
      fits = charge.reserve(body, body.size() + buffer_.size() + queuedBytes(), limit);
    }
    if (fits) fits = parseBufferedBody(parser, charge, limit, ec);
    if (fits && !ec && !parser.is_done()) {
      stream_.expires_after(std::chrono::milliseconds(limits_.client_idle_timeout_ms));
      if (length && !parser.chunked())
        fits = co_await readBodyRest(head.body(), charge, *length, ec);
      else
        fits = co_await readChunkedRest(parser, charge, ec);
    }
    if (!fits) co_return co_await refuseOverBudget(outcome);
    if (!ec) {
      if (parser.chunked()) dropTrailers(head);
      co_return true;
    }
    co_await bodyFailed(ec, outcome);
    co_return false;
  }

  // readBody's usual case without a coroutine frame (one allocation per request, asio's cache being full): a
  // Content-Length body that came whole with its head, within limits.max_body_bytes and the body budget, no
  // 100-continue. False: readBody must run; nothing was consumed unless the body was taken whole.
  bool bodyReadWhole(RequestParser& parser, BodyCharge& charge) {
    const auto length = parser.content_length();
    if (!length || parser.chunked() || *length > limits_.max_body_bytes || buffer_.size() < *length) return false;
    if (parser.get().find(http::field::expect) != parser.get().end()) return false;
    std::string& body = parser.get().body();
    if (!charge.reserve(body, static_cast<size_t>(*length), static_cast<size_t>(*length))) return false;
    parser.eager(true);
    error_code ec;
    return net::parseBuffered(parser, buffer_, ec) && !ec && parser.is_done();
  }

  asio::awaitable<void> bodyFailed(const error_code& ec, RequestOutcome& outcome) {
    if (ec == http::error::body_limit) {
      co_await reject(outcome, GatewayError::kBodyTooLarge, bodyTooLarge(), false);
    } else if (ec == http::error::buffer_overflow || ec == http::error::header_limit) {
      co_await reject(outcome, GatewayError::kHeaderTooLarge,
                      "a chunk-size line or the trailer section is larger than limits.max_header_bytes + " +
                          std::to_string(kBufferSlackBytes) + " bytes",
                      false);
    } else if (long_extension_) {
      co_await reject(outcome, GatewayError::kHeaderTooLarge,
                      "a chunk extension is longer than " + std::to_string(kMaxChunkExtensionBytes) + " bytes", false);
    } else if (ec != beast::error::timeout && ec != asio::error::connection_reset) {
      co_await reject(outcome, GatewayError::kMalformedHttp, "request body could not be read: " + ec.message(), false);
    } else {
      outcome.fail(GatewayError::kMalformedHttp, "request body could not be read: " + ec.message());
    }
  }

  // The body's growth did not fit the gateway-wide budget: 503 with retry-after instead of the memory, and the
  // connection closes (the rest of the body is unread).
  asio::awaitable<bool> refuseOverBudget(RequestOutcome& outcome) {
    unread_body_ = true;
    stream_.expires_after(kErrorWriteTimeout);
    co_await reject(outcome, GatewayError::kBodyBufferFull,
                    "the gateway holds as many request bodies as limits.max_buffered_body_bytes (" +
                        std::to_string(limits_.max_buffered_body_bytes) + " bytes) allows; retry later",
                    false);
    co_return false;
  }

  // Parses what the session buffer holds into the body, the body's buffer grown (and charged) first for all of it.
  // False when the growth does not fit the budget.
  bool parseBufferedBody(RequestParser& parser, BodyCharge& charge, size_t limit, error_code& ec) {
    std::string& body = parser.get().body();
    while (!parser.is_done() && buffer_.size() > 0) {
      if (!charge.reserve(body, body.size() + buffer_.size(), limit)) return false;
      const size_t buffered = buffer_.size();
      if (!net::parseBuffered(parser, buffer_, ec) || ec || buffer_.size() == buffered) break;
    }
    return true;
  }

  // The rest of a Content-Length body (the parser took what the session buffer held, which is then empty), read
  // from the socket straight into the body's string: the engine's request is written from there, so the prompt is
  // never copied between the socket and the upstream write (Beast's parser would read it into the session buffer
  // and copy it over). Read in steps, each filling the capacity the body has been charged for, which doubles from
  // kFirstBodyStepBytes or grows at once to what the kernel already holds: the memory follows the bytes that came,
  // not the length the head announced. A connection
  // that ends early is a partial message, as Beast reports it. False when a step does not fit the budget.
  asio::awaitable<bool> readBodyRest(std::string& body, BodyCharge& charge, uint64_t length, error_code& ec) {
    while (!ec && body.size() < length) {
      const size_t have = body.size();
      // A full buffer grows to hold at least what the kernel already has for it (one copy, not one per doubling).
      const size_t needed = have < charge.charged() ? have + 1 : have + std::max<size_t>(1, queuedBytes());
      if (!charge.reserve(body, needed, length)) co_return false;
      const size_t step = static_cast<size_t>(std::min<uint64_t>(length, charge.charged())) - have;
      body.resize(have + step);  // zero-fills this step only, which is read into at once
      const size_t n = co_await asio::async_read(stream_, asio::buffer(body.data() + have, step),
                                                 asio::redirect_error(kAwait, ec));
      if (ec == asio::error::eof) ec = http::error::partial_message;
      if (ec) body.resize(have + n);
    }
    co_return true;
  }

  // Bytes the kernel holds for this connection, not yet read (0 when it cannot say): the memory they take is already
  // the client's to spend, so a body's buffer may grow to them without trusting the length its head announced.
  size_t queuedBytes() {
    asio::socket_base::bytes_readable queued;
    error_code ec;
    stream_.socket().io_control(queued, ec);
    return ec ? 0 : queued.get();
  }

  // The rest of a chunked body, through Beast's parser: the session buffer is filled from the socket (as
  // http::async_read would, at most its room at a time) and each parse step's growth of the body is charged first.
  // False when it does not fit the budget.
  asio::awaitable<bool> readChunkedRest(RequestParser& parser, BodyCharge& charge, error_code& ec) {
    while (!ec && !parser.is_done()) {
      const size_t room = buffer_.max_size() - buffer_.size();
      if (room == 0) {
        ec = http::error::buffer_overflow;
        break;
      }
      const size_t n = co_await stream_.async_read_some(buffer_.prepare(std::min(room, kChunkedReadBytes)),
                                                        asio::redirect_error(kAwait, ec));
      buffer_.commit(n);
      if (ec == asio::error::eof) ec = http::error::partial_message;
      if (!ec && !parseBufferedBody(parser, charge, static_cast<size_t>(limits_.max_body_bytes), ec)) co_return false;
    }
    co_return true;
  }

  // Beast's parser appends a chunked body's trailer fields to the head's: remove every field after the head's own.
  void dropTrailers(proxy::ClientHead& head) const {
    auto it = head.begin();
    for (size_t i = 0; i < head_fields_ && it != head.end(); ++i) ++it;
    while (it != head.end()) it = head.erase(it);
  }

  asio::awaitable<bool> serveLocal(const Route& route, RequestParser& parser, BodyCharge& charge,
                                   RequestOutcome& outcome, const ClientAuth& auth, bool keep_alive) {
    if (!co_await readBody(parser, charge, outcome)) co_return false;
    if (route.kind == Route::kModels) {
      outcome.succeed(200);
      co_return co_await writeResponse(stream_, 200, "application/json",
                                       modelsBody(*services_.pods.snapshot(), routing::steadyNowMs(), auth), keep_alive,
                                       outcome.headers(), framing_) && keep_alive;
    }
    if (route.kind == Route::kMethodNotAllowed) {
      HeaderList allow;
      allow.emplace_back("allow", route.allow);
      co_return co_await reject(outcome, GatewayError::kMethodNotAllowed,
                                std::string("method not allowed; use ") + route.allow, keep_alive, std::move(allow));
    }
    co_return co_await reject(outcome, GatewayError::kNotFound,
                              "unknown path '" + openai::printable(parser.get().target(), 256) + "'", keep_alive);
  }

  asio::awaitable<bool> serveProxy(openai::Endpoint endpoint, RequestParser& parser, BodyCharge& charge,
                                   RequestOutcome& outcome, ClientAuth& auth, bool keep_alive) {
    if (!bodyReadWhole(parser, charge) && !co_await readBody(parser, charge, outcome)) co_return false;
    auto& head = parser.get();
    PreparedRequest& prepared = request_->prepared.emplace();
    co_await preparation_.prepare({.endpoint = endpoint,
                                   .body = head.body(),
                                   .headers = routeHeaders(head, services_.config.flow_control.tenant_header),
                                   .rng = worker_.rng,
                                   .auth = &auth,
                                   .connections = &worker_.tokenizer_connections,
                                   .client = &stream_,
                                   .pipelined = &buffer_,
                                   .trace = outcome.trace()},
                                  prepared);
    outcome.setRequest(prepared.request);
    outcome.setSlotWait(prepared.slot_wait_seconds);
    if (prepared.refusal) co_return co_await refusePrepared(outcome, *prepared.refusal, keep_alive);
    co_return co_await relayPrepared(endpoint, head, prepared, outcome, auth, keep_alive);
  }

  // serveProxy's second half (its own coroutine: one frame holding both halves' locals would be larger than asio
  // recycles): the prepared request relayed to its pod (or pods), and its outcome counted.
  asio::awaitable<bool> relayPrepared(openai::Endpoint endpoint, ClientRequest& head, PreparedRequest& prepared,
                                      RequestOutcome& outcome, ClientAuth& auth, bool keep_alive) {
    routing::Decision& decision = prepared.decision;
    const bool responses = endpoint == openai::Endpoint::kResponses;
    auth.stripCredentials(head);
    // A client's kv_transfer_params never reaches a pod unless the configuration says so: it names the hosts the
    // engine's KV connector would pull KV from (a way to make pods connect anywhere). The decode leg's own is the
    // prefill pod's answer; a split request never passes the client's.
    std::string stripped_body;
    if (prepared.request.has_kv_transfer_params &&
        (prepared.decode || !services_.config.disaggregation.pass_client_kv_transfer_params)) {
      proxy::pd::BodyEdit edit = proxy::pd::decodeBody(head.body(), "");
      if (!edit.ok()) {
        prepared.decision.ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
        if (prepared.decode) prepared.decode->ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
        co_return co_await reject(outcome, GatewayError::kInvalidRequest, edit.error, keep_alive);
      }
      stripped_body = std::move(edit.body);
    }
    proxy::PodHealth health{services_.pods, services_.config.health_check, routing::steadyNowMs};
    proxy::RelayRequest relay_request{stream_, worker_.pool, services_.config.upstream, health, head,
                                      stripped_body.empty() ? head.body() : stripped_body,
                                      outcome.requestId(), relay_heads_, keep_alive,
                                      [&](routing::Decision& failed, std::span<const PodId> exclude) {
                                        return preparation_.chooseAgain(prepared, failed, exclude, worker_.rng);
                                      }};
    relay_request.pipelined = &buffer_;  // the next request, if the client sends it during this one's response
    relay_request.error_shape = framing_.error_shape;  // a stream cut short ends with an error event of its API
    relay_request.capture_response_id = responses;
    relay_request.trace = outcome.trace();  // attempts are spans of the request's trace and propagate it
    if (prepared.decode) co_return co_await serveDisaggregated(prepared, relay_request, outcome, auth, keep_alive);
    outcome.setDisaggregation(prepared.pd_outcome);
    if (responses)
      relay_request.on_response_id = [this](const std::string& id, const std::string& pod) {
        services_.response_affinity.remember(id, pod);
      };
    proxy::RelayOutcome relayed = co_await proxy::relay(relay_request, decision);
    prepared.flow.served(relayed.output_tokens, relayed.first_body_seconds, prepared.request.stream);
    outcome.setDecision(decision, relayed);
    auth.charge(relayed);
    if (!relayed.response_started && !relayed.client_gone) {
      // The table gives the status and the retry-after (a local resource limit: the client may retry soon).
      co_return co_await writeError(stream_, proxy::errorFor(relayed.failure), relayed.error, keep_alive,
                                    outcome.headers(), {}, framing_) && keep_alive;
    }
    co_return relayed.keep_client;
  }

  // GET/DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel: relayed to the pod that produced {id} (no body
  // model to route by). An id the gateway does not remember, or whose pod is no longer ready, is answered 404 by
  // the gateway (the response's state lived on that pod); an id that cannot be one is answered 400.
  asio::awaitable<bool> serveResponseById(RequestParser& parser, BodyCharge& charge, RequestOutcome& outcome,
                                          ClientAuth& auth, bool keep_alive) {
    using Outcome = routing::ResponseAffinity::Outcome;
    if (!co_await readBody(parser, charge, outcome)) co_return false;
    auto& head = parser.get();
    const std::string id(responseIdOf(head.target()));
    if (!openai::validResponseId(id))
      co_return co_await reject(outcome, GatewayError::kInvalidRequest,
                                "'" + openai::printable(id, 64) + "' is not a response id (1 to " +
                                    std::to_string(openai::kMaxResponseIdBytes) + " characters of A-Z a-z 0-9 _ . -)",
                                keep_alive);
    routing::ResponseAffinity& affinity = services_.response_affinity;
    const std::optional<std::string> pod_name = affinity.podOf(id);
    discovery::PodPtr pod = pod_name ? services_.pods.snapshot()->find(*pod_name) : nullptr;
    if (pod && !pod->ready(routing::steadyNowMs())) pod = nullptr;
    if (!pod) {
      affinity.count(pod_name ? Outcome::kPodGone : Outcome::kUnknown);
      co_return co_await reject(outcome, GatewayError::kNotFound,
                                "Response with id '" + id + "' not found" +
                                    (pod_name ? " (the pod that produced it is no longer ready)" : ""),
                                keep_alive);
    }
    affinity.count(Outcome::kHit);
    routing::Decision decision;
    decision.pod = pod;
    decision.strategy = "response-affinity";
    auth.stripCredentials(head);
    proxy::PodHealth health{services_.pods, services_.config.health_check, routing::steadyNowMs};
    proxy::RelayRequest relay_request{stream_, worker_.pool, services_.config.upstream, health, head, head.body(),
                                      outcome.requestId(), relay_heads_, keep_alive,
                                      [](routing::Decision&, std::span<const PodId>) {
                                        routing::Decision none;  // the response lives on one pod: no other is tried
                                        none.failure = routing::RouteFailure::kNoReadyPod;
                                        return none;
                                      }};
    relay_request.pipelined = &buffer_;
    relay_request.trace = outcome.trace();
    proxy::RelayOutcome relayed = co_await proxy::relay(relay_request, decision);
    outcome.setDecision(decision, relayed);
    if (head.method() == http::verb::delete_ && relayed.status / 100 == 2) affinity.forget(id);
    if (!relayed.response_started && !relayed.client_gone) {
      co_return co_await writeError(stream_, proxy::errorFor(relayed.failure), relayed.error, keep_alive,
                                    outcome.headers(), {}, framing_) && keep_alive;
    }
    co_return relayed.keep_client;
  }

  // A disaggregated model's request (docs/configuration.md, "Disaggregated prefill/decode"): in connector mode the
  // prefill leg (pd::prefillBody) on the prefill pod, then the decode leg (the client's body with the prefill
  // answer's kv_transfer_params) relayed from the decode pod; in sidecar mode one request to the decode pod naming
  // the prefill pod in x-prefiller-host-port. `rq` is the client's relay request (body, head, request id).
  asio::awaitable<bool> serveDisaggregated(PreparedRequest& prepared, proxy::RelayRequest& rq, RequestOutcome& outcome,
                                           ClientAuth& auth, bool keep_alive) {
    routing::Decision& prefill = prepared.decision;
    routing::Decision& decode = *prepared.decode;
    const config::DisaggregationConfig& pd_config = services_.config.disaggregation;
    std::string decode_body;
    std::string host_port;
    std::string_view pd_outcome = "sidecar";
    std::optional<proxy::PrefillLegOutcome> leg;
    if (pd_config.mode == config::DisaggregationConfig::Mode::kSidecar) {
      host_port = proxy::pd::prefillerHostPort(prefill.pod->spec().host, prefill.pod->spec().port);
    } else {
      proxy::pd::BodyEdit prefill_body = proxy::pd::prefillBody(rq.body);
      if (!prefill_body.ok()) {
        decode.ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
        prefill.ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
        co_return co_await reject(outcome, GatewayError::kInvalidRequest, prefill_body.error, keep_alive);
      }
      proxy::RelayRequest prefill_rq{rq.client,   rq.pool,       rq.config,         rq.health,   rq.head,
                                     prefill_body.body, rq.request_id, rq.head_buffer, rq.client_keep_alive,
                                     rq.choose_again, rq.pipelined};
      prefill_rq.trace = rq.trace;
      leg.emplace(co_await proxy::prefillLeg(prefill_rq, prefill, kMaxPrefillAnswerBytes));
      prefill.ticket.end();  // the prefill pod is done with it: its in-flight count must not last the decode
      const bool answered = leg->failure == proxy::FailureKind::kNone || leg->failure == proxy::FailureKind::kEngineError;
      if (!answered || leg->status / 100 != 2) {
        // No prefill: the decode pod is never sent the request; the client gets the prefill pod's own answer when
        // it gave one (e.g. a 400 for a prompt over its context), else the gateway's error for the failure.
        decode.ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
        outcome.setDisaggregation("prefill_failed", &prefill, &*leg);
        if (leg->failure == proxy::FailureKind::kClientGone) {
          outcome.fail(GatewayError::kClientGone, leg->error);
          co_return false;
        }
        if (!answered) co_return co_await reject(outcome, proxy::errorFor(leg->failure), leg->error, keep_alive);
        outcome.succeed(leg->status);
        co_return co_await writeResponse(stream_, leg->status, "application/json", std::move(leg->answer), keep_alive,
                                         outcome.headers(), framing_) && keep_alive;
      }
      const proxy::pd::KvTransferParams params =
          proxy::pd::extractKvTransferParams(leg->answer, config::DisaggregationConfig::kMaxTransferParamsBytes);
      pd_outcome = params.present() ? "disaggregated" : "no_transfer_params";
      if (!params.present()) outcome.noteTransfer(params.absent_reason);
      proxy::pd::BodyEdit edit = proxy::pd::decodeBody(rq.body, params.json);
      decode_body = std::move(edit.body);
    }
    proxy::RelayRequest decode_rq{rq.client,        rq.pool,       rq.config,         rq.health,
                                  rq.head,          decode_body.empty() ? rq.body : decode_body,
                                  rq.request_id,    rq.head_buffer, rq.client_keep_alive,
                                  rq.choose_again,  rq.pipelined};
    decode_rq.trace = rq.trace;
    decode_rq.prefill_pod = prefill.pod->name();
    decode_rq.prefiller_host_port = host_port;
    proxy::RelayOutcome relayed = co_await proxy::relay(decode_rq, decode);
    prepared.flow.served(relayed.output_tokens, relayed.first_body_seconds, prepared.request.stream);
    if (!leg) {
      // Sidecar: the prefill pod's part is the sidecar's; the gateway learns only whether the decode leg began.
      if (relayed.first_byte_seconds < 0 && relayed.failure != proxy::FailureKind::kClientGone)
        prefill.ticket.attemptFailed(routing::AttemptFailure::kNotComputed);
      prefill.ticket.completed({relayed.status, -1, -1, std::nullopt, std::nullopt, 0});
    }
    outcome.setDecision(decode, relayed);
    outcome.setDisaggregation(pd_outcome, &prefill, leg ? &*leg : nullptr, relayed.first_byte_seconds);
    auth.charge(relayed);
    if (!relayed.response_started && !relayed.client_gone) {
      co_return co_await writeError(stream_, proxy::errorFor(relayed.failure), relayed.error, keep_alive,
                                    outcome.headers(), {}, framing_) && keep_alive;
    }
    co_return relayed.keep_client;
  }

  // A prefill leg's answer is one token and the KV's block ids: a pod that sends more is cut off (the request fails).
  static constexpr size_t kMaxPrefillAnswerBytes = 4 << 20;

  // The parser's chunk-extension check (it keeps a reference: a member of RequestState, before the parser).
  struct ChunkCheck {
    ClientSession* session;
    void operator()(uint64_t, std::string_view extensions, error_code& ec) const {
      if (extensions.size() > kMaxChunkExtensionBytes) {
        session->long_extension_ = true;
        ec = http::error::bad_chunk_extension;
      }
    }
  };
  // The request being served: in the connection, not in serveOne's and serveProxy's coroutine frames, which then
  // stay within the 1,020 bytes asio recycles per thread (a larger frame costs a malloc per request and evicts a
  // cached block, so that the next small frame misses too). One request at a time per connection: emplaced when
  // it begins, destroyed when serveOne returns (EndRequestOnExit), whichever way: the outcome, declared first, is
  // destroyed last (its log line and metrics), after the prepared request's tickets and the body.
  struct RequestState {
    explicit RequestState(ClientSession& session)
        : outcome(session.services_.outcomes),
          body_charge(session.services_.body_budget, openai::paddingBytes()),
          check_chunk{&session} {}
    RequestOutcome outcome;
    BodyCharge body_charge;  // before the parser, which holds the body: the body is freed before its charge is released
    ChunkCheck check_chunk;
    RequestParser parser;
    std::optional<PreparedRequest> prepared;  // a proxied request's (serveProxy)
  };
  struct EndRequestOnExit {
    std::optional<RequestState>& slot;
    ~EndRequestOnExit() { slot.reset(); }
  };

  Worker& worker_;
  const SessionServices& services_;
  RequestPreparation& preparation_;
  const config::LimitsConfig& limits_;
  beast::tcp_stream stream_;
  asio::steady_timer head_timer_;  // limits.header_timeout_ms for the current request's head
  net::IdleDeadline idle_;         // limits.client_idle_timeout_ms between requests: one timer for the connection
  bool head_timed_out_ = false;
  uint64_t head_generation_ = 0;
  beast::flat_buffer buffer_;
  Framing framing_;             // the current request's HTTP version and method, for gateway-made responses
  size_t head_fields_ = 0;      // fields in the current request's head (later ones are trailers)
  bool long_extension_ = false;  // the current request's chunk-extension check fired
  bool waiting_ = false;         // waiting for the next request (Worker::clients)
  bool unread_body_ = false;     // a refusal left the client's body unread: discardUnread before the close
  std::string relay_heads_;      // the relay's head buffer, kept from request to request (RelayRequest::head_buffer)
  std::optional<RequestState> request_;  // the request being served (serveOne)
};

}  // namespace

namespace {
// Accept errors that say the process (or the system) is out of a resource: accepting again at once would fail again.
bool outOfResources(const error_code& ec) {
  return ec == asio::error::no_descriptors || ec == boost::system::errc::too_many_files_open_in_system ||
         ec == asio::error::no_buffer_space || ec == asio::error::no_memory;
}
}  // namespace

void startAccepting(Worker& worker) {
  worker.acceptor.async_accept([&worker](error_code ec, asio::ip::tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !worker.acceptor.is_open()) return;
    if (outOfResources(ec)) {
      using std::chrono::milliseconds;
      worker.accept_backoff = std::min(milliseconds(1000), std::max(milliseconds(10), worker.accept_backoff * 2));
      log::warn("cannot accept a client connection: {}; pausing accepts for {} ms", ec.message(),
                worker.accept_backoff.count());
      worker.accept_pause.expires_after(worker.accept_backoff);
      worker.accept_pause.async_wait([&worker](error_code wait_ec) {
        if (!wait_ec) startAccepting(worker);
      });
      return;
    }
    worker.accept_backoff = std::chrono::milliseconds(0);
    if (!ec) {
      const SessionServices& services = worker.services;
      if (services.open_connections.load() >= static_cast<int64_t>(services.config.limits.max_connections)) {
        log::warn("refusing a client connection: limits.max_connections ({}) reached",
                  services.config.limits.max_connections);
        socket.close(ec);
      } else {
        socket.set_option(asio::ip::tcp::no_delay(true), ec);
        net::drained_reads::enable(socket.native_handle());
        services.open_connections.fetch_add(1);
        asio::co_spawn(
            worker.io,
            [&worker, s = std::move(socket)]() mutable -> asio::awaitable<void> {
              struct Count {
                std::atomic<int64_t>& open;
                ~Count() { open.fetch_sub(1); }
              } count{worker.services.open_connections};
              ClientSession session(worker, std::move(s));
              co_await session.run();
            },
            asio::detached);
      }
    }
    startAccepting(worker);
  });
}

void closeIdleClients(Worker& worker) {
  for (auto [stream, waiting] : worker.clients) {
    if (!*waiting) continue;
    error_code ignored;
    stream->socket().cancel(ignored);
  }
}

}  // namespace prefixgate::server
