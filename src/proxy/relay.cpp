#include "proxy/relay.h"

#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <vector>

#include <nlohmann/json.hpp>

#include "openai/errors.h"
#include "proxy/upstream_attempt.h"
#include "proxy/usage_scanner.h"
#include "util/log.h"

namespace prefixgate::proxy {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr size_t kRelayBufferBytes = 16 * 1024;
constexpr auto kAwait = asio::use_awaitable;
using ClientResponse = http::response<http::buffer_body, Fields>;

// The status the client gets when an attempt failed before any response (no head to relay).
int statusOf(FailureKind kind) { return openai::errorInfo(errorFor(kind)).status; }

// The response head as the client receives it: the engine's end-to-end headers plus the gateway's own, framed for
// the client: no body for 204/304, the engine's length when known, else chunked; HTTP/1.0 clients get the body
// delimited by the connection's close (they cannot read chunked).
void copyResponseHead(const ResponseParser& parser, ClientResponse& to, const RelayRequest& rq,
                      const routing::Decision& d) {
  const auto& from = parser.get();
  to.result(from.result_int());
  to.version(11);
  std::string_view connection_tokens = from[http::field::connection];
  for (const auto& field : from) {
    if (isHopByHop(field.name_string()) || field.name() == http::field::content_length) continue;
    if (namedByConnection(connection_tokens, field.name_string())) continue;
    to.insert(field.name_string(), field.value());
  }
  to.set("request-id", rq.request_id);
  to.set("routing-strategy", d.strategy);
  to.set("target-pod", d.pod->name());
  if (d.match_percent >= 0) to.set("x-prefix-match-percent", std::to_string(d.match_percent));
  const bool bodiless = from.result() == http::status::no_content || from.result() == http::status::not_modified;
  if (bodiless) {
  } else if (auto length = parser.content_length()) {
    to.content_length(*length);
  } else if (rq.head.version() >= 11) {
    to.chunked(true);
  }
  to.keep_alive(rq.client_keep_alive && rq.head.version() >= 11);
}

// After the response began, an engine failure cannot become an error status: an event stream gets a final SSE
// error event and the end of the body (the connection then closes), so clients do not hang.
// `mid_event`: the bytes relayed so far end inside an event, which a blank line closes first.
asio::awaitable<void> endStreamWithError(beast::tcp_stream& client,
                                         http::response_serializer<http::buffer_body, Fields>& sr,
                                         ClientResponse& res, const std::string& message, bool mid_event) {
  if (res.has_content_length() || res[http::field::content_type].find("text/event-stream") == std::string_view::npos)
    co_return;
  nlohmann::json event = nlohmann::json::parse(openai::errorBody(502, message));
  std::string text = (mid_event ? "\n\ndata: " : "data: ") + event.dump() + "\n\n";
  res.body().data = text.data();
  res.body().size = text.size();
  res.body().more = false;
  error_code ec;
  co_await http::async_write(client, sr, asio::redirect_error(kAwait, ec));
}

// Streams the response whose head `ex` holds to the client; returns how the body ended.
asio::awaitable<FailureKind> relayResponse(RelayRequest& rq, routing::Decision& d, Exchange& ex, ClientWatch& watch,
                                           RelayOutcome& out) {
  auto& up_head = ex.parser->get();
  ClientResponse res;
  copyResponseHead(*ex.parser, res, rq, d);
  out.status = static_cast<int>(up_head.result_int());
  http::response_serializer<http::buffer_body, Fields> serializer{res};
  rq.client.expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
  res.body().data = nullptr;
  res.body().more = true;
  error_code ec;
  // When body bytes already came with the head (typical of a small non-streamed answer), the head goes out with
  // the first body write (one send instead of two); otherwise at once, so a slow first event never delays it.
  if (ex.buffer.size() == 0 || ex.parser->is_done())
    co_await http::async_write_header(rq.client, serializer, asio::redirect_error(kAwait, ec));
  out.response_started = true;
  std::array<char, kRelayBufferBytes> buffer;
  UsageScanner usage;
  FailureKind ended = FailureKind::kNone;
  bool body_ended = false;  // a write with more=false went out: the response to the client is complete
  bool mid_event = false;   // the last bytes written did not end with an SSE event's blank line
  while (!ec && !ex.parser->is_done()) {
    up_head.body().data = buffer.data();
    up_head.body().size = buffer.size();
    ex.stream->expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
    error_code read_ec;
    // read_some returns as soon as any body bytes arrived, so each SSE event is forwarded without waiting for more.
    co_await http::async_read_some(*ex.stream, ex.buffer, *ex.parser, asio::redirect_error(kAwait, read_ec));
    if (read_ec == http::error::need_buffer) read_ec = {};
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
      if (!watch.gone && !serializer.is_header_done()) {
        out.response_started = false;  // nothing reached the client yet: it gets a clean error status instead
        out.status = statusOf(ended);
        co_return ended;
      }
      if (!watch.gone) co_await endStreamWithError(rq.client, serializer, res, out.error, mid_event);
      break;
    }
    res.body().data = buffer.data();
    res.body().size = buffer.size() - up_head.body().size;
    res.body().more = !ex.parser->is_done();
    // A read that only consumed chunk framing has no body bytes: writing an empty buffer would end the chunked
    // response to the client early, so wait for real bytes.
    if (res.body().size == 0) {
      if (res.body().more) continue;
      break;  // the body ended with no bytes in this read: the final write below ends the response once
    }
    // The first body bytes (a stream's first token, or a whole answer): the engine has computed the prompt.
    if (d.pending) d.pending.reset();
    const std::string_view relayed(buffer.data(), res.body().size);
    usage.feed(relayed);
    mid_event = !relayed.ends_with("\n\n");
    rq.client.expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
    co_await http::async_write(rq.client, serializer, asio::redirect_error(kAwait, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (!ec && !res.body().more) body_ended = true;
    if (ec) {
      ended = FailureKind::kClientGone;
      out.error = "client write failed: " + ec.message();
    }
  }
  if (!ec && !body_ended) {
    // The last bytes went out with more=true (or the body ended with its head, e.g. Content-Length: 0 or a 204):
    // one terminating write ends the response (for chunked bodies, the last chunk).
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = false;
    co_await http::async_write(rq.client, serializer, asio::redirect_error(kAwait, ec));
  }
  if (watch.gone) ended = FailureKind::kClientGone;
  if (out.status == 200) rq.health.delivered(*d.pod, usage.outputTokens());
  out.output_tokens = usage.outputTokens();
  out.prompt_tokens = usage.promptTokens();
  out.cached_tokens = usage.cachedTokens();
  if (!ec && ex.parser->is_done()) {
    // A close-delimited body (HTTP/1.0 client) ends with the connection.
    out.keep_client = res.keep_alive();
    if (ex.parser->keep_alive() && ex.buffer.size() == 0) {
      watch.upstream = nullptr;
      rq.pool.give(d.pod->id(), std::move(ex.stream));
    }
  }
  co_return ended;
}

}  // namespace

bool isHopByHop(std::string_view name) {
  static constexpr std::array<std::string_view, 9> kHopByHop = {
      "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade", "expect",
      "proxy-authorization"};
  for (std::string_view h : kHopByHop)
    if (beast::iequals(name, h)) return true;
  return false;
}

asio::awaitable<RelayOutcome> relay(RelayRequest& rq, routing::Decision& d) {
  RelayOutcome out;
  const auto started = std::chrono::steady_clock::now();
  auto watch = std::make_shared<ClientWatch>();
  watchClient(rq.client, watch);
  Exchange ex;
  struct StopWatch {
    std::shared_ptr<ClientWatch> w;
    beast::tcp_stream& client;
    ~StopWatch() {
      w->done = true;
      w->upstream = nullptr;
      error_code ignored;
      client.socket().cancel(ignored);
    }
  } stop_watch{watch, rq.client};  // declared after `ex`: clears the watcher's pointer before the stream dies

  std::vector<discovery::PodPtr> tried;  // keeps every attempted pod alive for the health report
  std::vector<PodId> tried_ids;
  std::vector<Attempt> attempts;
  std::string error;
  bool fresh = false;
  for (;;) {
    if (tried.empty() || tried.back() != d.pod) {
      tried.push_back(d.pod);
      tried_ids.push_back(d.pod->id());
    }
    attempts.push_back(co_await attemptOnce(rq, *d.pod, fresh, *watch, ex, error));
    reportPodFailure(attempts.back(), rq.health);
    const NextStep next = nextStep(attempts, rq.config.max_retries);
    if (next == NextStep::kRetryFresh) {
      fresh = true;
      ++out.retries;
      continue;
    }
    if (next == NextStep::kSwitchPod) {
      routing::Decision again = rq.choose_again(tried_ids);
      if (again.pod) {
        d = std::move(again);
        fresh = false;
        ++out.retries;
        continue;
      }
    }
    break;
  }

  Attempt& last = attempts.back();
  if (last.failure != FailureKind::kNone && last.failure != FailureKind::kEngineError) {
    // No response head to relay (with no other pod to try, a 5xx is relayed as the engine sent it).
    out.failure = last.failure;
    out.status = statusOf(last.failure);
    out.client_gone = last.failure == FailureKind::kClientGone;
    out.error = out.client_gone ? "client closed the connection before the response" : error;
  } else {
    out.first_byte_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const FailureKind body = co_await relayResponse(rq, d, ex, *watch, out);
    last.response_started = out.response_started;
    if (last.failure == FailureKind::kNone) last.failure = body;
    if (body != FailureKind::kNone) out.failure = body;
    out.client_gone = body == FailureKind::kClientGone;
    if (out.client_gone && out.error.empty()) out.error = "client closed the connection during the response";
  }
  if (out.failure != FailureKind::kNone) out.error_reason = std::string(failureLabel(out.failure));
  reportHealth(attempts, rq.body, rq.health);
  co_return out;
}

}  // namespace prefixgate::proxy
