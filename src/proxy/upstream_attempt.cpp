#include "proxy/upstream_attempt.h"

#include <algorithm>
#include <array>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>

#include "net/drained_reads.h"
#include "net/ready_io.h"
#include "proxy/pd_protocol.h"
#include "util/log.h"

namespace prefixgate::proxy {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

namespace {

constexpr auto kAwait = asio::use_awaitable;
// The most the watcher reads at once of a pipelined request (the session buffer bounds the total).
constexpr size_t kPipelinedReadBytes = 16 * 1024;

bool isTimeout(const error_code& ec) { return ec == beast::error::timeout; }

// The request head as the engine receives it, written into `out`: the client's end-to-end headers, the gateway's
// Host and x-request-id, the body's length (the body itself goes out unchanged from where the client's was read).
// With tracing on (`propagation`), the client's trace headers are replaced by the attempt's (docs/configuration.md,
// "Tracing"); off, they pass through like any end-to-end header.
void writeUpstreamHead(const RelayRequest& rq, const discovery::PodSpec& pod, const trace::Propagation* propagation,
                       std::string& out) {
  out.clear();
  out.append(rq.head.method_string()).append(std::string_view(" ")).append(rq.head.target());
  out.append(std::string_view(" HTTP/1.1\r\n"));
  appendEndToEndFields(out, rq.head, [propagation](const auto& field) {
    const std::string_view name = field.name_string();
    if (propagation && (beast::iequals(name, "traceparent") || beast::iequals(name, "tracestate"))) return true;
    // A client never names a prefill pod: the decode pod's sidecar would connect wherever it says.
    return field.name() == http::field::host || beast::iequals(name, "x-request-id") ||
           std::any_of(pd::kPrefillerHeaders.begin(), pd::kPrefillerHeaders.end(),
                       [name](std::string_view h) { return beast::iequals(name, h); });
  });
  if (propagation) {
    appendField(out, "traceparent", {propagation->traceparent.data(), propagation->traceparent.size()});
    if (!propagation->tracestate.empty()) appendField(out, "tracestate", propagation->tracestate);
  }
  appendField(out, "Host", pod.address);
  appendField(out, "x-request-id", rq.request_id);
  if (!rq.prefiller_host_port.empty()) appendField(out, pd::kPrefillerHostPortHeader, rq.prefiller_host_port);
  char length[24];
  appendField(out, "Content-Length", {length, std::to_chars(length, length + sizeof length, rq.body.size()).ptr});
  out.append(kLineEnd);
}

// The pod's address: an IP literal as is, a host name from this thread's cache or else the resolver.
asio::awaitable<error_code> podEndpoint(const discovery::PodSpec& pod, AddressCache& cache,
                                        asio::ip::tcp::endpoint& endpoint) {
  error_code ec;
  endpoint = asio::ip::tcp::endpoint(asio::ip::make_address(pod.host, ec), pod.port);
  if (!ec) co_return ec;
  const auto now = AddressCache::Clock::now();
  if (auto cached = cache.find(pod.address, now)) {
    endpoint = *cached;
    co_return error_code{};
  }
  asio::ip::tcp::resolver resolver(co_await asio::this_coro::executor);
  auto results = co_await resolver.async_resolve(pod.host, std::to_string(pod.port), asio::redirect_error(kAwait, ec));
  if (!ec && results.empty()) ec = asio::error::host_not_found;
  if (ec) co_return ec;
  endpoint = results.begin()->endpoint();
  cache.remember(pod.address, endpoint, now);
  co_return ec;
}

// Opens a connection to the pod with TCP_NODELAY.
asio::awaitable<error_code> connect(UpstreamStream& stream, const discovery::PodSpec& pod,
                                    std::chrono::milliseconds timeout, AddressCache& cache) {
  asio::ip::tcp::endpoint endpoint;
  error_code ec = co_await podEndpoint(pod, cache, endpoint);
  if (ec) co_return ec;
  stream.expires_after(timeout);
  co_await stream.async_connect(endpoint, asio::redirect_error(kAwait, ec));
  if (!ec) stream.socket().set_option(asio::ip::tcp::no_delay(true), ec);
  if (!ec) net::drained_reads::enable(stream.socket().native_handle());
  if (ec) cache.forget(pod.address);
  co_return ec;
}

FailureKind connectFailure(const error_code& ec) {
  if (isLocalError(ec)) return FailureKind::kLocal;
  return isTimeout(ec) ? FailureKind::kConnectTimeout : FailureKind::kConnect;
}

FailureKind exchangeFailure(const error_code& ec) {
  if (isTimeout(ec)) return FailureKind::kResponseHeaderTimeout;
  if (ec == http::error::body_limit) return FailureKind::kResponseTooLarge;
  if (ec == asio::error::connection_reset || ec == asio::error::broken_pipe || ec == http::error::end_of_stream ||
      ec == asio::error::eof || ec == http::error::partial_message)
    return FailureKind::kClosedBeforeResponse;
  return FailureKind::kBadResponse;
}

// What the watcher found when the client sent bytes during the response.
enum class Pipelined { kKept, kFull, kGone };

// Moves the bytes the client has sent (its next, pipelined request) into the session's buffer, where the next
// request is read from, so the next peek waits again for new bytes or the hang-up instead of seeing these. Reads
// only what is already there (non-blocking), and never more than the buffer may hold.
Pipelined keepPipelined(beast::tcp_stream& client, ClientWatch& watch) {
  if (!watch.pipelined) return Pipelined::kFull;
  beast::flat_buffer& buffer = *watch.pipelined;
  auto& socket = client.socket();
  error_code ec;
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  while (!ec) {
    const size_t room = buffer.max_size() - buffer.size();
    if (room == 0) return Pipelined::kFull;
    const size_t n = socket.receive(buffer.prepare(std::min(room, kPipelinedReadBytes)), 0, ec);
    buffer.commit(n);
  }
  if (ec == asio::error::would_block || ec == asio::error::try_again) return Pipelined::kKept;
  return Pipelined::kGone;  // eof or an error: the client is gone
}

void hangUp(ClientWatch& watch) {
  watch.gone = true;
  if (watch.waiter) watch.waiter->cancel();
  if (watch.upstream) {
    error_code ignored;
    watch.upstream->socket().close(ignored);
  }
}

}  // namespace

void watchClient(beast::tcp_stream& client, std::shared_ptr<ClientWatch> watch) {
  // A one-byte peek is an ordinary read: asio starts it without touching epoll (the socket is registered for input
  // once, edge-triggered), where async_wait(wait_read) re-arms the descriptor with an epoll_ctl on every request.
  // It completes with a byte (a pipelined request: kept, then watched behind), with eof or an error (the client is
  // gone), or cancelled when the relay ends.
  client.socket().async_receive(asio::buffer(watch->peek), asio::socket_base::message_peek,
                                [&client, watch](error_code ec, size_t) mutable {
                                  if (watch->done || ec == asio::error::operation_aborted) return;
                                  if (ec) return hangUp(*watch);
                                  switch (keepPipelined(client, *watch)) {
                                    case Pipelined::kKept: return watchClient(client, std::move(watch));
                                    case Pipelined::kGone: return hangUp(*watch);
                                    case Pipelined::kFull: return;  // the bound: no longer watched
                                  }
                                });
}

bool isLocalError(const error_code& ec) {
  namespace errc = boost::system::errc;
  return ec == errc::too_many_files_open || ec == errc::too_many_files_open_in_system ||
         ec == errc::no_buffer_space || ec == errc::address_not_available;
}

asio::awaitable<Attempt> attemptOnce(const RelayRequest& rq, discovery::PodState& pod, bool fresh,
                                     ClientWatch& watch, Exchange& ex, std::string& error,
                                     const trace::Propagation* propagation) {
  const discovery::PodSpec& spec = pod.spec();
  Attempt attempt{&pod, FailureKind::kNone, false, false};
  // The watcher must never see a stream this replaces (it would close freed memory).
  watch.upstream = nullptr;
  ex.stream = fresh ? nullptr : rq.pool.take(pod.id());
  attempt.reused_connection = ex.stream != nullptr;
  if (!ex.stream) ex.stream = std::make_unique<UpstreamStream>(co_await asio::this_coro::executor);
  watch.upstream = ex.stream.get();  // a hang-up during the connect aborts it too
  error_code ec;
  if (!attempt.reused_connection) {
    ec = co_await connect(*ex.stream, spec, std::chrono::milliseconds(rq.config.connect_timeout_ms),
                          rq.pool.addresses());
    if (watch.gone) attempt.failure = FailureKind::kClientGone;
    else if (ec) attempt.failure = connectFailure(ec);
    if (attempt.failure != FailureKind::kNone) {
      error = "cannot connect to pod " + spec.name + ": " + ec.message();
      if (!watch.gone) log::warn("request {}: {} ({})", rq.request_id, error, spec.address);
      co_return attempt;
    }
  }

  writeUpstreamHead(rq, spec, propagation, rq.head_buffer);
  const std::array<asio::const_buffer, 2> request{asio::buffer(rq.head_buffer), asio::buffer(rq.body)};
  ex.stream->expires_after(std::chrono::milliseconds(rq.config.idle_timeout_ms));
  const size_t sent = net::sendNow(*ex.stream, request, ec);
  if (!ec && sent < asio::buffer_size(request)) ec = co_await net::writeRest(*ex.stream, request, sent);
  ex.buffer.clear();
  // The deadline covers every interim head too: 1xx answers (100 Continue, 103 Early Hints) are read past, never
  // relayed as the final answer (the real one would then reach the next user of this connection). The head is read
  // as the body will be (net::ReadyReader: no timer armed per read, the connection's own deadline).
  net::ReadyReader reader(ex.stream->socket(), ex.stream->reads(),
                          std::chrono::milliseconds(rq.config.response_header_timeout_ms));
  bool first_head = true;
  do {
    if (ec) break;
    ex.parser.emplace();
    ex.parser->header_limit(kMaxResponseHeaderBytes);
    if (rq.config.max_response_bytes > 0) ex.parser->body_limit(rq.config.max_response_bytes);
    else ex.parser->body_limit(boost::none);
    co_await reader.read(*ex.parser, ex.buffer, ec, std::exchange(first_head, false));
  } while (!ec && ex.parser->get().result_int() / 100 == 1);
  // Until the body's first read: a slow client write in between is no engine timeout.
  ex.stream->reads().pause();
  if (watch.gone) {
    attempt.failure = FailureKind::kClientGone;
  } else if (ec) {
    attempt.failure = exchangeFailure(ec);
    error = attempt.failure == FailureKind::kResponseTooLarge
                ? "pod " + spec.name + "'s response is larger than upstream.max_response_bytes (" +
                      std::to_string(rq.config.max_response_bytes) + " bytes)"
                : "pod " + spec.name + " failed before responding: " + ec.message();
  } else if (ex.parser->get().result_int() >= 500) {
    attempt.failure = FailureKind::kEngineError;
    error = "pod " + spec.name + " answered " + std::to_string(ex.parser->get().result_int());
    log::warn("request {}: {}", rq.request_id, error);
  }
  co_return attempt;
}

}  // namespace prefixgate::proxy
