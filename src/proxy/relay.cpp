#include "proxy/relay.h"

#include <array>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <span>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "net/ready_io.h"
#include "openai/errors.h"
#include "proxy/upstream_attempt.h"
#include "proxy/response_id_scanner.h"
#include "proxy/usage_scanner.h"
#include "trace/span_names.h"
#include "trace/tracer.h"
#include "util/log.h"
#include "util/recycling_allocator.h"

namespace prefixgate::proxy {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr size_t kRelayBufferBytes = 16 * 1024;
// Relay buffers a thread keeps for its next responses (4 MiB at most); a burst beyond it allocates and frees.
constexpr size_t kKeptRelayBuffersPerThread = 256;

// The buffer one response's body passes through, taken from the thread's kept ones and given back when the response
// ends: in a coroutine's frame it made the frame a 17 KB allocation per request (asio recycles frames of up to about
// 1 KB only). A relay runs on one thread; a buffer freed on another (at shutdown) joins that thread's list.
class RelayBuffer {
 public:
  RelayBuffer() {
    auto& kept = keptBuffers();
    if (kept.empty()) {
      block_ = std::make_unique_for_overwrite<char[]>(kRelayBufferBytes);
    } else {
      block_ = std::move(kept.back());
      kept.pop_back();
    }
  }
  ~RelayBuffer() {
    auto& kept = keptBuffers();
    if (kept.size() < kKeptRelayBuffersPerThread) kept.push_back(std::move(block_));
  }
  RelayBuffer(const RelayBuffer&) = delete;
  RelayBuffer& operator=(const RelayBuffer&) = delete;
  char* data() { return block_.get(); }
  static constexpr size_t size() { return kRelayBufferBytes; }

 private:
  static std::vector<std::unique_ptr<char[]>>& keptBuffers() {
    thread_local std::vector<std::unique_ptr<char[]>> kept = [] {
      std::vector<std::unique_ptr<char[]>> v;
      v.reserve(kKeptRelayBuffersPerThread);  // giving one back never allocates
      return v;
    }();
    return kept;
  }
  std::unique_ptr<char[]> block_;
};

template <class T>
using RecycledVector = std::vector<T, util::RecyclingAllocator<T>>;

// The status the client gets when an attempt failed before any response (no head to relay).
int statusOf(FailureKind kind) { return openai::errorInfo(errorFor(kind)).status; }

// How the client's response delimits its body: the engine's length when known, else chunked; HTTP/1.0 clients get
// the body delimited by the connection's close (they cannot read chunked); none for 204/304.
struct ClientFraming {
  bool has_length = false;
  bool chunked = false;
  bool keep_alive = false;
};

std::string_view decimal(char (&digits)[24], uint64_t value) {
  return {digits, std::to_chars(digits, digits + sizeof digits, value).ptr};
}

// The response head as the client receives it, written into `out`: the engine's end-to-end headers plus the
// gateway's own, framed for the client.
ClientFraming writeResponseHead(const ResponseParser& parser, const RelayRequest& rq, const routing::Decision& d,
                                std::string& out) {
  const auto& from = parser.get();
  char digits[24];
  out.clear();
  out.append(std::string_view("HTTP/1.1 ")).append(decimal(digits, from.result_int())).append(std::string_view(" "));
  out.append(http::obsolete_reason(from.result())).append(kLineEnd);
  const bool match_percent = d.match_percent >= 0;
  // The gateway's own headers replace any the engine sent under the same names.
  appendEndToEndFields(out, from, [&](const auto& field) {
    const std::string_view name = field.name_string();
    return beast::iequals(name, "request-id") || beast::iequals(name, "routing-strategy") ||
           beast::iequals(name, "target-pod") || beast::iequals(name, "prefill-pod") ||
           (match_percent && beast::iequals(name, "x-prefix-match-percent"));
  });
  appendField(out, "request-id", rq.request_id);
  appendField(out, "routing-strategy", d.strategy);
  appendField(out, "target-pod", d.pod->name());
  if (!rq.prefill_pod.empty()) appendField(out, "prefill-pod", rq.prefill_pod);
  if (match_percent) appendField(out, "x-prefix-match-percent", decimal(digits, d.match_percent));
  ClientFraming framing;
  const bool bodiless = from.result() == http::status::no_content || from.result() == http::status::not_modified;
  if (bodiless) {
  } else if (auto length = parser.content_length()) {
    appendField(out, "Content-Length", decimal(digits, *length));
    framing.has_length = true;
  } else if (rq.head.version() >= 11) {
    appendField(out, "Transfer-Encoding", "chunked");
    framing.chunked = true;
  }
  framing.keep_alive = rq.client_keep_alive && rq.head.version() >= 11;
  if (!framing.keep_alive) appendField(out, "Connection", "close");
  out.append(kLineEnd);
  return framing;
}

// Writes the response to the client in its framing: the head goes out with the first body bytes (one gathered
// write), each later write is one chunk (or the raw bytes), and the last one ends the body. What the socket takes at
// once is sent by a plain function (no coroutine frame per write); only a rest the socket could not take is waited
// for (write() then returns false and finish() sends it).
class ClientWriter {
 public:
  ClientWriter(beast::tcp_stream& client, std::string_view head, ClientFraming framing)
      : client_(client), head_(head), framing_(framing) {}

  // True when all of it went out (or `ec` says why not); false when finish() must send the rest.
  bool write(std::string_view data, bool last, error_code& ec) {
    n_ = 0;
    if (!head_sent_) buffers_[n_++] = asio::buffer(head_);
    if (framing_.chunked && !data.empty()) {
      char* end = std::to_chars(chunk_line_, chunk_line_ + sizeof chunk_line_ - 2, data.size(), 16).ptr;
      *end++ = '\r';
      *end++ = '\n';
      buffers_[n_++] = asio::buffer(chunk_line_, end - chunk_line_);
    }
    if (!data.empty()) buffers_[n_++] = asio::buffer(data);
    if (framing_.chunked && !data.empty()) buffers_[n_++] = asio::buffer("\r\n", 2);
    if (framing_.chunked && last) buffers_[n_++] = asio::buffer("0\r\n\r\n", 5);
    head_sent_ = true;
    ec = {};
    sent_ = net::sendNow(client_, all(), ec);
    return ec || sent_ == asio::buffer_size(all());
  }
  // Sends what the last write() left, under the client stream's timeout. `data` must still be alive.
  asio::awaitable<error_code> finish() { co_return co_await net::writeRest(client_, all(), sent_); }
  bool headSent() const { return head_sent_; }

 private:
  std::span<const asio::const_buffer> all() const { return {buffers_.data(), n_}; }
  beast::tcp_stream& client_;
  std::string_view head_;
  ClientFraming framing_;
  bool head_sent_ = false;
  char chunk_line_[20];
  std::array<asio::const_buffer, 5> buffers_;
  size_t n_ = 0;
  size_t sent_ = 0;
};

// After the response began, an engine failure cannot become an error status: an event stream gets a final SSE
// error event and the end of the body (the connection then closes), so clients do not hang.
// `mid_event`: the bytes relayed so far end inside an event, which a blank line closes first.
// Anthropic's and the Responses API's streams name each event: the error is `event: error`; the Responses API's
// data is its own error event, numbered after the last event relayed (`last_sequence_number`).
asio::awaitable<void> endStreamWithError(ClientWriter& writer, ClientFraming framing, std::string_view content_type,
                                         const std::string& message, bool mid_event, openai::ErrorShape shape,
                                         std::optional<uint64_t> last_sequence_number) {
  if (framing.has_length || content_type.find("text/event-stream") == std::string_view::npos) co_return;
  std::string text = mid_event ? "\n\n" : "";
  if (shape != openai::ErrorShape::kOpenAI) text += "event: error\n";
  text += "data: ";
  text += shape == openai::ErrorShape::kResponses ? openai::responsesStreamError(502, message, last_sequence_number)
                                                  : openai::errorBody(502, message, {}, shape);
  text += "\n\n";
  error_code ec;
  if (!writer.write(text, true, ec)) co_await writer.finish();
}

// Streams the response whose head `ex` holds to the client; returns how the body ended.
asio::awaitable<FailureKind> relayResponse(RelayRequest& rq, routing::Decision& d, Exchange& ex, ClientWatch& watch,
                                           RelayOutcome& out) {
  const auto head_at = std::chrono::steady_clock::now();  // out.first_byte_seconds after the start
  auto& up_head = ex.parser->get();
  const ClientFraming framing = writeResponseHead(*ex.parser, rq, d, rq.head_buffer);
  out.status = static_cast<int>(up_head.result_int());
  ClientWriter writer(rq.client, rq.head_buffer, framing);
  rq.client.expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
  error_code ec;
  // When body bytes already came with the head (typical of a small non-streamed answer), the head goes out with
  // the first body write (one send instead of two); otherwise at once, so a slow first event never delays it.
  if (ex.buffer.size() == 0 && !ex.parser->is_done() && !writer.write({}, false, ec)) ec = co_await writer.finish();
  out.response_started = true;
  RelayBuffer buffer;
  // A Responses answer: its sequence numbers too. A JSON answer (not a stream): no SSE events to count.
  UsageScanner usage(rq.capture_response_id, !isJsonMediaType(up_head[http::field::content_type]));
  ResponseIdScanner response_id;
  FailureKind ended = FailureKind::kNone;
  bool body_ended = false;  // the last write went out: the response to the client is complete
  bool mid_event = false;   // the last bytes written did not end with an SSE event's blank line
  // The engine's socket is read with no timer work per read and no epoll_ctl per event (net::ReadyReader), each
  // wait under the idle timeout (the relay's own deadline).
  net::ReadyReader reader(ex.stream->socket(), ex.stream->reads(), std::chrono::milliseconds(rq.config.idle_timeout_ms));
  error_code deferred_ec;  // an error met while gathering already-read events: handled after they are written
  while (!ec && !ex.parser->is_done()) {
    up_head.body().data = buffer.data();
    up_head.body().size = buffer.size();
    error_code read_ec = std::exchange(deferred_ec, {});
    // A read returns as soon as any body bytes arrived, so each SSE event is forwarded without waiting for more.
    // Bytes that came with the head (or with the previous read) are parsed at once.
    if (!read_ec && !net::parseBuffered(*ex.parser, ex.buffer, read_ec))
      co_await reader.read(*ex.parser, ex.buffer, read_ec);
    if (read_ec == http::error::need_buffer) read_ec = {};
    // One write for what one read brought: Beast's parser stops after each chunk (each SSE event of a chunked
    // stream), so the chunks already read are gathered into the relay buffer first (nothing waits for the socket).
    while (!read_ec && !ex.parser->is_done() && up_head.body().size > 0) {
      error_code more_ec;
      if (!net::parseBuffered(*ex.parser, ex.buffer, more_ec)) break;  // all parsed, or a part of a chunk head
      if (more_ec == http::error::need_buffer) break;                   // the relay buffer is full
      if (more_ec) {
        deferred_ec = more_ec;
        break;
      }
    }
    if (read_ec) {
      ec = read_ec;
      ended = watch.gone ? FailureKind::kClientGone
              : read_ec == beast::error::timeout     ? FailureKind::kIdleTimeout
              : read_ec == http::error::body_limit   ? FailureKind::kResponseTooLarge
                                                     : FailureKind::kInterrupted;
      out.error = ended == FailureKind::kResponseTooLarge
                      ? "pod " + d.pod->name() + "'s response is larger than upstream.max_response_bytes (" +
                            std::to_string(rq.config.max_response_bytes) + " bytes)"
                      : "pod " + d.pod->name() + " response interrupted: " + read_ec.message();
      if (!watch.gone && !writer.headSent()) {
        out.response_started = false;  // nothing reached the client yet: it gets a clean error status instead
        out.status = statusOf(ended);
        co_return ended;
      }
      if (!watch.gone)
        co_await endStreamWithError(writer, framing, up_head[http::field::content_type], out.error, mid_event,
                                    rq.error_shape, usage.lastSequenceNumber());
      break;
    }
    const size_t n = buffer.size() - up_head.body().size;
    const bool more = !ex.parser->is_done();
    // A read that only consumed chunk framing has no body bytes: wait for real bytes (or the end, written below).
    if (n == 0) {
      if (more) continue;
      break;
    }
    // The first body bytes (a stream's first token, or a whole answer): the engine has computed the prompt.
    if (out.first_body_seconds < 0) {
      out.first_body_seconds = out.first_byte_seconds + std::chrono::duration<double>(
                                                            std::chrono::steady_clock::now() - head_at).count();
      d.ticket.firstByte();
      if (rq.trace) rq.trace->firstToken();
    }
    const std::string_view relayed(buffer.data(), n);
    usage.feed(relayed);
    if (rq.capture_response_id && response_id.id().empty()) {
      response_id.feed(relayed);
      if (!response_id.id().empty() && out.status / 100 == 2 && rq.on_response_id)
        rq.on_response_id(response_id.id(), d.pod->name());
    }
    mid_event = !relayed.ends_with("\n\n");
    rq.client.expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
    if (!writer.write(relayed, !more, ec)) ec = co_await writer.finish();
    if (!ec && !more) body_ended = true;
    if (ec) {
      ended = FailureKind::kClientGone;
      out.error = "client write failed: " + ec.message();
    }
  }
  // The body ended with no bytes in its last read (or with its head, e.g. Content-Length: 0 or a 204): one
  // terminating write ends the response (for chunked bodies, the last chunk; with the head when not yet sent).
  if (!ec && !body_ended && !writer.write({}, true, ec)) ec = co_await writer.finish();
  if (watch.gone) ended = FailureKind::kClientGone;
  out.output_tokens = usage.outputTokens();
  out.prompt_tokens = usage.promptTokens();
  out.cached_tokens = usage.cachedTokens();
  out.response_id = response_id.id();
  if (!ec && ex.parser->is_done()) {
    // A close-delimited body (HTTP/1.0 client) ends with the connection.
    out.keep_client = framing.keep_alive;
    // llama.cpp's server closes the connection after every stream although its head announced keep-alive: pooled,
    // it would race its own close (the next request could be written before the close arrives).
    const bool engine_closes_after_stream =
        d.pod->engineKind() == engine::EngineKind::kLlamaCpp &&
        up_head[http::field::content_type].find("text/event-stream") != std::string_view::npos;
    if (ex.parser->keep_alive() && ex.buffer.size() == 0 && !engine_closes_after_stream) {
      watch.upstream = nullptr;
      rq.pool.give(d.pod->id(), std::move(ex.stream));
    }
  }
  co_return ended;
}

}  // namespace

namespace {

// The client watched while a leg runs (watchClient): its hang-up aborts the engine's work. Stopped (and the
// watcher's pointer to the upstream stream cleared) when it goes: declare it after the Exchange it watches.
class WatchedClient {
 public:
  explicit WatchedClient(RelayRequest& rq)
      : watch_(std::allocate_shared<ClientWatch>(util::RecyclingAllocator<ClientWatch>())), client_(rq.client) {
    watch_->pipelined = rq.pipelined;
    watchClient(rq.client, watch_);
  }
  ~WatchedClient() {
    watch_->done = true;
    watch_->upstream = nullptr;
    error_code ignored;
    client_.socket().cancel(ignored);
  }
  WatchedClient(const WatchedClient&) = delete;
  WatchedClient& operator=(const WatchedClient&) = delete;
  ClientWatch& operator*() const { return *watch_; }
  ClientWatch* operator->() const { return watch_.get(); }

 private:
  std::shared_ptr<ClientWatch> watch_;
  beast::tcp_stream& client_;
};

// One leg's attempts (from the thread's recycled blocks, util/recycling_allocator.h).
struct Attempts {
  RecycledVector<discovery::PodPtr> tried;  // keeps every attempted pod alive for the health report
  RecycledVector<PodId> tried_ids;
  RecycledVector<Attempt> list;
  std::string error;
  int retries = 0;        // attempts on another pod
  int stale_retries = 0;  // sent again on a fresh connection after a pooled one turned out closed
  // Tracing: the last attempt's span, still open while its response is relayed (endAttemptSpan closes it).
  std::optional<trace::Span> span;
};

// The attempt's client span (tracing on, the request sampled): where it went and how it ended.
void describeAttempt(const RelayRequest& rq, const Attempt& attempt, const Exchange& ex, const std::string& error,
                     size_t number, trace::Span& span) {
  const discovery::PodSpec& spec = attempt.pod->spec();
  span.set("http.request.method", rq.head.method_string());
  span.set("url.path", rq.head.target().substr(0, rq.head.target().find('?')));
  span.set("server.address", spec.host);
  span.set("server.port", static_cast<int64_t>(spec.port));
  span.set("prefixgate.pod", spec.name);
  span.set("prefixgate.attempt", static_cast<int64_t>(number));
  span.set("prefixgate.reused_connection", attempt.reused_connection);
  if ((attempt.failure == FailureKind::kNone || attempt.failure == FailureKind::kEngineError) && ex.parser)
    span.set("http.response.status_code", static_cast<int64_t>(ex.parser->get().result_int()));
  if (attempt.failure != FailureKind::kNone) {
    span.set("error.type", failureLabel(attempt.failure));
    span.fail(error);
  }
}

// Ends the open attempt span (if any); `body` is how the relayed body ended (kNone: whole).
void endAttemptSpan(RelayRequest& rq, Attempts& a, FailureKind body, const std::string& error) {
  if (!a.span) return;
  if (body != FailureKind::kNone && rq.trace->recording()) {
    a.span->set("error.type", failureLabel(body));
    a.span->fail(error);
  }
  rq.trace->end(std::move(*a.span));
  a.span.reset();
}

// Attempts the request on `d`'s pod until one gets a response head (or an engine error, relayed as it is when no
// other pod is left), switching pods as failover.h says; `d` ends as the last pod's decision, and each failed
// attempt is told to its decision's ticket. On return `ex` holds the last attempt's exchange.
asio::awaitable<void> attemptUntilAnswered(RelayRequest& rq, routing::Decision& d, ClientWatch& watch, Exchange& ex,
                                           Attempts& a) {
  bool fresh = false;
  for (;;) {
    if (a.tried.empty() || a.tried.back() != d.pod) {
      a.tried.push_back(d.pod);
      a.tried_ids.push_back(d.pod->id());
    }
    std::optional<trace::Propagation> propagation;
    if (rq.trace) {
      a.span.emplace(rq.trace->startChild(trace::httpSpanName(rq.head.method_string(), rq.head.target()),
                                          trace::SpanKind::kClient));
      propagation = rq.trace->propagation(*a.span);
    }
    a.list.push_back(co_await attemptOnce(rq, *d.pod, fresh, watch, ex, a.error, propagation ? &*propagation : nullptr));
    if (a.span && rq.trace->recording()) describeAttempt(rq, a.list.back(), ex, a.error, a.list.size(), *a.span);
    reportPodFailure(a.list.back(), rq.health);
    const NextStep next = nextStep(a.list, rq.config.max_retries);
    // Another attempt follows (or none): this one's span ends now; the one that got a head stays open for its body.
    if (next != NextStep::kRelay) endAttemptSpan(rq, a, FailureKind::kNone, a.error);
    if (next == NextStep::kRetryFresh) {
      // The engine had closed the pooled connection: not a retry of the request's, nor the pod's fault.
      fresh = true;
      ++a.stale_retries;
      rq.pool.countStaleSent();
      continue;
    }
    // The attempt failed (not a stale pooled connection): the decision learns it, whatever follows.
    if (a.list.back().failure != FailureKind::kNone) d.ticket.attemptFailed(attemptFailureOf(a.list.back().failure));
    if (next == NextStep::kSwitchPod) {
      routing::Decision again = rq.choose_again(d, a.tried_ids);
      if (again.pod) {
        d = std::move(again);
        fresh = false;
        ++a.retries;
        continue;
      }
    }
    co_return;
  }
}

// Reads the whole body of the response whose head `ex` holds into `out`, at most `max_bytes`; the connection goes
// back to the pool when the engine keeps it. Returns how it ended (kResponseTooLarge beyond max_bytes).
asio::awaitable<FailureKind> readWholeBody(RelayRequest& rq, const discovery::PodState& pod, Exchange& ex,
                                           ClientWatch& watch, size_t max_bytes, std::string& out) {
  auto& head = ex.parser->get();
  RelayBuffer buffer;
  // Read as relayResponse reads: each wait under the idle timeout, on the connection's own deadline.
  net::ReadyReader reader(ex.stream->socket(), ex.stream->reads(), std::chrono::milliseconds(rq.config.idle_timeout_ms));
  while (!ex.parser->is_done()) {
    head.body().data = buffer.data();
    head.body().size = buffer.size();
    error_code ec;
    if (!net::parseBuffered(*ex.parser, ex.buffer, ec)) co_await reader.read(*ex.parser, ex.buffer, ec);
    if (ec == http::error::need_buffer) ec = {};
    if (ec)
      co_return watch.gone ? FailureKind::kClientGone
                : ec == beast::error::timeout ? FailureKind::kIdleTimeout
                                              : FailureKind::kInterrupted;
    out.append(buffer.data(), buffer.size() - head.body().size);
    if (out.size() > max_bytes) co_return FailureKind::kResponseTooLarge;
  }
  if (ex.parser->keep_alive() && ex.buffer.size() == 0) {
    watch.upstream = nullptr;
    rq.pool.give(pod.id(), std::move(ex.stream));
  }
  co_return watch.gone ? FailureKind::kClientGone : FailureKind::kNone;
}

}  // namespace

asio::awaitable<RelayOutcome> relay(RelayRequest& rq, routing::Decision& d) {
  RelayOutcome out;
  const auto started = std::chrono::steady_clock::now();
  // The exchange and the attempts in recycled blocks: in the frame they would take it past what asio recycles.
  const util::RecycledPtr<Exchange> exchange = util::makeRecycled<Exchange>();
  Exchange& ex = *exchange;
  WatchedClient watch(rq);  // after `ex`: clears the watcher's pointer before the stream dies
  const util::RecycledPtr<Attempts> attempts_block = util::makeRecycled<Attempts>();
  Attempts& attempts = *attempts_block;
  co_await attemptUntilAnswered(rq, d, *watch, ex, attempts);
  out.retries = attempts.retries;
  out.stale_retries = attempts.stale_retries;

  Attempt& last = attempts.list.back();
  if (last.failure != FailureKind::kNone && last.failure != FailureKind::kEngineError) {
    // No response head to relay (with no other pod to try, a 5xx is relayed as the engine sent it).
    out.failure = last.failure;
    out.status = statusOf(last.failure);
    out.client_gone = last.failure == FailureKind::kClientGone;
    out.error = out.client_gone ? "client closed the connection before the response" : attempts.error;
  } else {
    out.first_byte_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const FailureKind body = co_await relayResponse(rq, d, ex, *watch, out);
    last.response_started = out.response_started;
    // A body that failed after a good head (the engine had begun; a relayed 5xx was told already).
    if (last.failure == FailureKind::kNone && body != FailureKind::kNone)
      d.ticket.attemptFailed(attemptFailureOf(body));
    if (last.failure == FailureKind::kNone) last.failure = body;
    if (body != FailureKind::kNone) out.failure = body;
    out.client_gone = body == FailureKind::kClientGone;
    if (out.client_gone && out.error.empty()) out.error = "client closed the connection during the response";
  }
  endAttemptSpan(rq, attempts, last.failure == FailureKind::kEngineError ? FailureKind::kNone : out.failure, out.error);
  if (out.failure != FailureKind::kNone) out.error_reason = std::string(failureLabel(out.failure));
  out.counted_prompt_tokens = d.ticket.facts().prompt_tokens;
  out.audit = d.ticket.completed({out.status, out.first_byte_seconds, out.first_body_seconds, out.prompt_tokens,
                                  out.cached_tokens, out.output_tokens,
                                  std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()});
  reportHealth(attempts.list, rq.body, rq.health);
  co_return out;
}

asio::awaitable<PrefillLegOutcome> prefillLeg(RelayRequest& rq, routing::Decision& d, size_t max_answer_bytes) {
  PrefillLegOutcome out;
  const auto started = std::chrono::steady_clock::now();
  Exchange ex;
  WatchedClient watch(rq);
  Attempts attempts;
  co_await attemptUntilAnswered(rq, d, *watch, ex, attempts);
  out.retries = attempts.retries;
  Attempt& last = attempts.list.back();
  out.failure = last.failure;
  out.error = attempts.error;
  if (last.failure == FailureKind::kNone || last.failure == FailureKind::kEngineError) {
    out.status = static_cast<int>(ex.parser->get().result_int());
    const FailureKind body = co_await readWholeBody(rq, *d.pod, ex, *watch, max_answer_bytes, out.answer);
    if (body != FailureKind::kNone) {
      // The answer is incomplete: the pod may have computed the prompt, but nothing can be handed on.
      if (last.failure == FailureKind::kNone) d.ticket.attemptFailed(attemptFailureOf(body));
      last.failure = body;
      out.failure = body;
      out.error = body == FailureKind::kResponseTooLarge
                      ? "prefill pod " + d.pod->name() + "'s answer is larger than " +
                            std::to_string(max_answer_bytes) + " bytes"
                      : "prefill pod " + d.pod->name() + "'s answer was cut off";
    } else {
      UsageScanner usage;
      usage.feed(out.answer);
      out.prompt_tokens = usage.promptTokens();
      out.cached_tokens = usage.cachedTokens();
      d.ticket.firstByte();
    }
  } else if (last.failure == FailureKind::kClientGone) {
    out.error = "client closed the connection during the prefill leg";
  }
  endAttemptSpan(rq, attempts, last.failure == FailureKind::kEngineError ? FailureKind::kNone : out.failure, out.error);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // The prefill pod's own record: its latency, its share of the prompt it held (the prediction audit).
  out.audit = d.ticket.completed({out.failure == FailureKind::kNone ? out.status : statusOf(out.failure), out.seconds,
                                  out.seconds, out.prompt_tokens, out.cached_tokens, 0});
  reportHealth(attempts.list, rq.body, rq.health);
  co_return out;
}

}  // namespace prefixgate::proxy
