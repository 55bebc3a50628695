#pragma once
// One event-loop thread of the gateway: its io_context, acceptor, upstream pool and random generators.
// Everything here is touched only from that thread (except stop/close requests, which are posted to it).
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <atomic>
#include <random>
#include <thread>
#include <unordered_map>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "proxy/upstream_pool.h"
#include "routing/response_affinity.h"
#include "server/request_outcome.h"
#include "tokenize/remote_tokenizer.h"

namespace prefixgate::server {

class BodyBudget;
class RequestPreparation;

// What a client connection uses, built once by the gateway and shared by every thread: the request path reaches
// nothing else (no Gateway&). Each outlives the workers.
struct SessionServices {
  const config::Config& config;
  const std::atomic<bool>& draining;         // new requests are refused and idle connections closed
  std::atomic<int64_t>& open_connections;    // limits.max_connections
  BodyBudget& body_budget;                   // limits.max_buffered_body_bytes
  const discovery::PodRegistry& pods;        // /v1/models, pod health
  RequestPreparation& preparation;           // a request's steps from its body to its pod
  OutcomeSinks outcomes;                     // the log line and metrics of each request
  routing::ResponseAffinity& response_affinity;  // Responses API: response id -> the pod that produced it
};

// The remote tokenizer's view of a thread's upstream pool: tokenize calls and relays share keep-alive connections.
class TokenizerConnections final : public tokenize::ConnectionPool {
 public:
  explicit TokenizerConnections(proxy::UpstreamPool& pool) : pool_(pool) {}
  std::unique_ptr<net::UpstreamStream> take(uint32_t pod) override { return pool_.take(PodId{pod}); }
  void give(uint32_t pod, std::unique_ptr<net::UpstreamStream> stream) override {
    pool_.give(PodId{pod}, std::move(stream));
  }

 private:
  proxy::UpstreamPool& pool_;
};

struct Worker {
  // `routing_seed` and `request_id_seed` come from config::streamSeed (reproducible under random_seed).
  Worker(const SessionServices& services, std::chrono::milliseconds pool_idle, uint64_t routing_seed,
         uint64_t request_id_seed)
      : services(services), io(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO), acceptor(io), pool(io, pool_idle), rng(routing_seed),
        request_id_seed(request_id_seed) {}
  const SessionServices& services;
  // Client connections, each with its flag "waiting for its next request" (those are closed at once when the
  // gateway drains). A connection registers once, not per request. Declared before `io`: a session still in the
  // io_context when it is destroyed unregisters from a live map.
  std::unordered_map<boost::beast::tcp_stream*, const bool*> clients;
  // One thread runs it, and only that thread starts, performs or cancels operations on its sockets (other threads
  // reach it by posting: draining, flow control's and slot waits' wake-ups): so the reactor keeps no lock per socket
  // operation (asio's UNSAFE_IO hint; its scheduler and timers stay locked for those posts). It also marks the
  // context one-threaded: what its own thread posts goes on a private queue without the scheduler's lock.
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor acceptor;
  proxy::UpstreamPool pool;
  TokenizerConnections tokenizer_connections{pool};
  std::mt19937_64 rng;        // routing: ties between equal pods, the random strategy
  uint64_t request_id_seed;  // seeds this thread's request ids (seedRequestIds) when the thread starts
  // Accepting pauses while the process is out of file descriptors (or socket memory), backing off from 10 ms to
  // 1 s, instead of spinning on an acceptor that stays readable.
  boost::asio::steady_timer accept_pause{io};
  std::chrono::milliseconds accept_backoff{0};
  std::thread thread;
};

// Accepts on the worker's acceptor until it closes, serving each connection on the same thread.
void startAccepting(Worker& worker);
// Closes idle keep-alive client connections (drain). Must run on the worker's thread.
void closeIdleClients(Worker& worker);

}  // namespace prefixgate::server
