#include "proxy/relay.h"

#include <sys/socket.h>

#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <optional>

#include <nlohmann/json.hpp>

#include "openai/errors.h"
#include "proxy/usage_scanner.h"
#include "util/log.h"

namespace prefixgate::proxy {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr size_t kRelayBufferBytes = 16 * 1024;
constexpr uint32_t kMaxResponseHeaderBytes = 64 * 1024;
constexpr auto kAwait = asio::use_awaitable;

// Watches the client socket while the engine works: when the client hangs up, the upstream connection is
// closed at once so the engine stops generating (instead of finishing a response nobody reads).
struct ClientWatch {
  bool done = false;
  bool gone = false;
  UpstreamStream* upstream = nullptr;
};

void watchClient(beast::tcp_stream& client, std::shared_ptr<ClientWatch> watch) {
  client.socket().async_wait(asio::socket_base::wait_read, [&client, watch](error_code ec) {
    if (watch->done || ec == asio::error::operation_aborted) return;
    if (!ec) {
      char c;
      ssize_t n = ::recv(client.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) return;  // a pipelined request, not a hang-up
    }
    watch->gone = true;
    if (watch->upstream) {
      error_code ignored;
      watch->upstream->socket().close(ignored);
    }
  });
}

bool isTimeout(const error_code& ec) { return ec == beast::error::timeout; }

std::string reasonOf(const error_code& ec) {
  if (isTimeout(ec)) return "timeout";
  if (ec == asio::error::connection_refused) return "refused";
  if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe) return "reset";
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == http::error::partial_message) return "closed";
  return "error";
}

// The request as the engine receives it: the client's end-to-end headers, the body unchanged.
http::request<http::buffer_body> upstreamRequest(const RelayRequest& rq, const discovery::PodSpec& pod) {
  http::request<http::buffer_body> req{rq.head.method(), rq.head.target(), 11};
  std::string_view connection_tokens = rq.head[http::field::connection];
  for (const auto& field : rq.head) {
    std::string_view name = field.name_string();
    if (isHopByHop(name) || field.name() == http::field::host || field.name() == http::field::content_length) continue;
    if (!connection_tokens.empty() && beast::http::token_list(connection_tokens).exists(name)) continue;
    req.insert(field.name_string(), field.value());
  }
  req.set(http::field::host, pod.address);
  req.set("x-request-id", rq.request_id);
  req.keep_alive(true);
  req.content_length(rq.body.size());
  req.body().data = const_cast<char*>(rq.body.data());  // buffer_body only reads through this pointer
  req.body().size = rq.body.size();
  req.body().more = false;
  return req;
}

// The response head as the client receives it: the engine's end-to-end headers plus the gateway's own.
void copyResponseHead(const http::response_header<>& from, http::response<http::buffer_body>& to,
                      const RelayRequest& rq, const routing::Decision& d, bool has_length, uint64_t length) {
  to.result(from.result_int());
  to.version(11);
  for (const auto& field : from) {
    if (isHopByHop(field.name_string()) || field.name() == http::field::content_length) continue;
    to.insert(field.name_string(), field.value());
  }
  to.set("request-id", rq.request_id);
  to.set("routing-strategy", d.strategy);
  to.set("target-pod", d.pod->name());
  if (d.match_percent >= 0) to.set("x-prefix-match-percent", std::to_string(d.match_percent));
  if (has_length) to.content_length(length);
  else to.chunked(true);
}

// After the response began, an engine failure cannot become an error status: an event stream gets a final SSE
// error event and a clean end of the chunked body (the connection then closes), so clients do not hang.
asio::awaitable<void> endStreamWithError(beast::tcp_stream& client, http::response_serializer<http::buffer_body>& sr,
                                         http::response<http::buffer_body>& res, const std::string& message) {
  if (!res.chunked() || res[http::field::content_type].find("text/event-stream") == std::string_view::npos) co_return;
  nlohmann::json event = nlohmann::json::parse(openai::errorBody(502, message));
  std::string text = "data: " + event.dump() + "\n\n";
  res.body().data = text.data();
  res.body().size = text.size();
  res.body().more = false;
  error_code ec;
  co_await http::async_write(client, sr, asio::redirect_error(kAwait, ec));
}

// Opens a connection to the pod (resolving a host name; IP literals skip the resolver), with TCP_NODELAY.
asio::awaitable<error_code> connect(UpstreamStream& stream, const discovery::PodSpec& pod,
                                    std::chrono::milliseconds timeout) {
  error_code ec;
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(pod.host, ec), pod.port);
  if (ec) {
    asio::ip::tcp::resolver resolver(co_await asio::this_coro::executor);
    auto results = co_await resolver.async_resolve(pod.host, std::to_string(pod.port), asio::redirect_error(kAwait, ec));
    if (!ec && results.empty()) ec = asio::error::host_not_found;
    if (ec) co_return ec;
    endpoint = results.begin()->endpoint();
  }
  stream.expires_after(timeout);
  co_await stream.async_connect(endpoint, asio::redirect_error(kAwait, ec));
  if (!ec) stream.socket().set_option(asio::ip::tcp::no_delay(true), ec);
  co_return ec;
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
  auto executor = co_await asio::this_coro::executor;
  const auto started = std::chrono::steady_clock::now();
  auto watch = std::make_shared<ClientWatch>();
  watchClient(rq.client, watch);
  struct StopWatch {
    std::shared_ptr<ClientWatch> w;
    beast::tcp_stream& client;
    ~StopWatch() {
      w->done = true;
      w->upstream = nullptr;
      error_code ignored;
      client.socket().cancel(ignored);
    }
  } stop_watch{watch, rq.client};

  std::vector<PodId> tried;
  std::unique_ptr<UpstreamStream> up;
  beast::flat_buffer up_buffer;
  std::optional<http::response_parser<http::buffer_body>> parser;
  bool fresh_only = false;  // after a reused connection failed, the retry uses a new one
  int pod_switches = 0;     // retries on another pod (bounded by max_retries); fresh-connection retries are free
  error_code ec;
  // Moves the request to another pod when the retry budget allows; false when it does not or no pod is left.
  auto switchPod = [&]() -> bool {
    if (pod_switches >= static_cast<int>(rq.config.max_retries)) return false;
    routing::Decision next = rq.choose_again(tried);
    if (!next.pod) return false;
    ++pod_switches;
    ++out.retries;
    d = std::move(next);
    fresh_only = false;
    return true;
  };
  auto passive = [&](bool ok) { d.pod->recordPassive(ok, routing::steadyNowMs(), rq.health); };
  for (;;) {
    const discovery::PodSpec& spec = d.pod->spec();
    if (tried.empty() || tried.back() != d.pod->id()) tried.push_back(d.pod->id());
    up = fresh_only ? nullptr : rq.pool.take(d.pod->id());
    const bool reused = up != nullptr;
    if (!up) {
      up = std::make_unique<UpstreamStream>(executor);
      ec = co_await connect(*up, spec, std::chrono::milliseconds(rq.config.connect_timeout_ms));
      if (ec) {
        if (watch->gone) break;
        log::warn("request {}: cannot connect to pod {} ({}): {}", rq.request_id, spec.name, spec.address, ec.message());
        out.error_reason = isTimeout(ec) ? "connect_timeout" : "connect";
        out.error = "cannot connect to pod " + spec.name + ": " + ec.message();
        passive(false);
        if (switchPod()) continue;
        out.status = isTimeout(ec) ? 504 : 502;
        co_return out;
      }
    }
    watch->upstream = up.get();

    auto req = upstreamRequest(rq, spec);
    up->expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
    co_await http::async_write(*up, req, asio::redirect_error(kAwait, ec));
    if (!ec) {
      parser.emplace();
      parser->header_limit(kMaxResponseHeaderBytes);
      up_buffer.clear();
      up->expires_after(std::chrono::milliseconds(rq.config.response_header_timeout_ms));
      co_await http::async_read_header(*up, up_buffer, *parser, asio::redirect_error(kAwait, ec));
    }
    if (!ec) {
      const int status = static_cast<int>(parser->get().result_int());
      passive(status < 500);
      if (status < 500) break;
      // An engine error before anything reached the client: another pod may serve it. The error response is
      // dropped with its connection; when no retry is possible it is relayed as the engine sent it.
      log::warn("request {}: pod {} answered {}", rq.request_id, spec.name, status);
      watch->upstream = nullptr;
      auto failed = std::move(up);
      if (switchPod()) continue;
      up = std::move(failed);
      watch->upstream = up.get();
      break;
    }
    if (watch->gone) break;
    if (reused && !isTimeout(ec) && !fresh_only) {
      // vLLM closes idle keep-alive connections; a reused one failing before any byte is retried once, fresh.
      fresh_only = true;
      ++out.retries;
      continue;
    }
    out.error_reason = isTimeout(ec) ? "response_header_timeout" : reasonOf(ec);
    out.error = "pod " + spec.name + " failed before responding: " + ec.message();
    passive(false);
    // A reset before any response byte is retried elsewhere; a timeout is not (the engine may still be working).
    if (!isTimeout(ec) && switchPod()) continue;
    out.status = isTimeout(ec) ? 504 : 502;
    co_return out;
  }
  if (watch->gone) {
    out.client_gone = true;
    out.status = 499;
    out.error = "client closed the connection before the response";
    co_return out;
  }
  out.first_byte_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // Relay the head, then the body through a small buffer: each chunk the engine sends is written at once.
  auto& up_head = parser->get();
  http::response<http::buffer_body> res;
  const auto length = parser->content_length();
  copyResponseHead(up_head.base(), res, rq, d, length.has_value(), length.value_or(0));
  res.keep_alive(rq.client_keep_alive);
  out.status = static_cast<int>(up_head.result_int());
  http::response_serializer<http::buffer_body> serializer{res};
  rq.client.expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
  res.body().data = nullptr;
  res.body().more = true;
  // When body bytes already came with the head (typical of a small non-streamed answer), the head goes out with
  // the first body write (one send instead of two); otherwise at once, so a slow first event never delays it.
  if (up_buffer.size() == 0 || parser->is_done())
    co_await http::async_write_header(rq.client, serializer, asio::redirect_error(kAwait, ec));
  out.response_started = true;
  std::array<char, kRelayBufferBytes> buffer;
  UsageScanner usage;
  bool body_ended = false;  // a write with more=false went out: the response to the client is complete
  while (!ec && !parser->is_done()) {
    up_head.body().data = buffer.data();
    up_head.body().size = buffer.size();
    up->expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
    error_code read_ec;
    // read_some returns as soon as any body bytes arrived, so each SSE event is forwarded without waiting for more.
    co_await http::async_read_some(*up, up_buffer, *parser, asio::redirect_error(kAwait, read_ec));
    if (read_ec == http::error::need_buffer) read_ec = {};
    if (read_ec) {
      out.error_reason = watch->gone ? "client_gone" : (isTimeout(read_ec) ? "idle_timeout" : reasonOf(read_ec));
      out.error = "pod " + d.pod->name() + " response interrupted: " + read_ec.message();
      ec = read_ec;
      if (!watch->gone && !serializer.is_header_done()) {
        passive(false);
        out.response_started = false;  // nothing reached the client yet: it gets a clean 502 instead
        out.status = 502;
        co_return out;
      }
      if (!watch->gone) {
        passive(false);
        co_await endStreamWithError(rq.client, serializer, res, out.error);
      }
      break;
    }
    res.body().data = buffer.data();
    res.body().size = buffer.size() - up_head.body().size;
    res.body().more = !parser->is_done();
    // A read that only consumed chunk framing has no body bytes: writing an empty buffer would end the chunked
    // response to the client early, so wait for real bytes.
    if (res.body().size == 0) {
      if (res.body().more) continue;
      break;  // the body ended with no bytes in this read: the final write below ends the response once
    }
    // The first body bytes (a stream's first token, or a whole answer): the engine has computed the prompt.
    if (d.pending) d.pending.reset();
    usage.feed(std::string_view(buffer.data(), res.body().size));
    rq.client.expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
    co_await http::async_write(rq.client, serializer, asio::redirect_error(kAwait, ec));
    if (ec == http::error::need_buffer) ec = {};
    if (!ec && !res.body().more) body_ended = true;
    if (ec) {
      out.error_reason = "client_gone";
      out.error = "client write failed: " + ec.message();
    }
  }
  if (!ec && !body_ended) {
    // The last bytes went out with more=true (or the body ended with its head, e.g. Content-Length: 0): one
    // terminating write ends the response (for chunked bodies, the last chunk).
    res.body().data = nullptr;
    res.body().size = 0;
    res.body().more = false;
    co_await http::async_write(rq.client, serializer, asio::redirect_error(kAwait, ec));
  }
  if (watch->gone || out.error_reason == "client_gone") {
    out.client_gone = true;
    if (out.error.empty()) out.error = "client closed the connection during the response";
  }
  // The pod's measured capacity (output tokens/s) counts every token it produced for a successful response.
  if (out.status == 200 && usage.outputTokens() > 0)
    d.pod->engine().addOutputTokens(usage.outputTokens(), routing::steadyNowMs());
  // A completed request makes its engine publish the blocks it stored: KV event sync watches for silence.
  if (out.status == 200) d.pod->kvSync().noteCompleted(routing::steadyNowMs());
  out.output_tokens = usage.outputTokens();
  out.prompt_tokens = usage.promptTokens();
  out.cached_tokens = usage.cachedTokens();
  if (!ec && parser->is_done()) {
    out.keep_client = rq.client_keep_alive;
    if (parser->keep_alive() && up_buffer.size() == 0) rq.pool.give(d.pod->id(), std::move(up));
  }
  co_return out;
}

}  // namespace prefixgate::proxy
