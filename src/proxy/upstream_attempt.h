#pragma once
// One attempt of a relayed request on one pod: a connection (pooled or fresh), the request written, the final
// response head read (1xx interim heads skipped). The result is a typed FailureKind; failover.h decides what next.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <memory>
#include <optional>
#include <string>

#include "proxy/failover.h"
#include "proxy/relay.h"
#include "proxy/response_parser.h"
#include "trace/tracer.h"

namespace prefixgate::proxy {

// The largest engine response head the relay reads (the fuzz target of the response parser uses it too).
inline constexpr uint32_t kMaxResponseHeaderBytes = 64 * 1024;

// Watches the client socket while the engine works: when the client hangs up, the upstream connection is closed
// at once so the engine stops generating. `upstream` always points at the live stream of the exchange (or is
// null): whoever replaces or gives away that stream updates it first. Bytes the client sends meanwhile (a
// pipelined request) are moved into `pipelined` so that the hang-up behind them is still seen; the watcher stops
// when that buffer is full (or, without one, at the first byte). `pipelined` and the client stream are touched only
// while !done: the relay sets done before either can go.
struct ClientWatch {
  bool done = false;
  bool gone = false;
  UpstreamStream* upstream = nullptr;
  // A request waiting in flow control's queue sleeps on this timer: the hang-up cancels it (same thread).
  boost::asio::steady_timer* waiter = nullptr;
  boost::beast::flat_buffer* pipelined = nullptr;
  char peek[1];  // the watcher's peeked byte (left in the socket)
};
void watchClient(boost::beast::tcp_stream& client, std::shared_ptr<ClientWatch> watch);


// The connection and parser of the current attempt; they outlive it when its response is relayed.
struct Exchange {
  std::unique_ptr<UpstreamStream> stream;
  boost::beast::basic_flat_buffer<util::RecyclingAllocator<char>> buffer;
  std::optional<ResponseParser> parser;
};

// Runs one attempt on `pod` (a pooled connection unless `fresh`). On kNone or kEngineError the exchange holds the
// final response head; `error` gets a message for the log when the attempt failed. With `propagation` (tracing on)
// the engine gets its traceparent and tracestate instead of the client's; null: the client's pass through.
boost::asio::awaitable<Attempt> attemptOnce(const RelayRequest& request, discovery::PodState& pod, bool fresh,
                                            ClientWatch& watch, Exchange& exchange, std::string& error,
                                            const trace::Propagation* propagation = nullptr);

// True for socket errors that come from this process's limits, not from the pod.
bool isLocalError(const boost::system::error_code& ec);

}  // namespace prefixgate::proxy
