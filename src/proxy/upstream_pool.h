#pragma once
// Keep-alive connections to engine pods, one pool per event-loop thread (no locks). Idle connections are closed
// after pool_idle_ms, before vLLM's own 5 s keep-alive timeout can race a reused connection, and each is checked
// before reuse: an engine may close a connection at any time without having said so (llama.cpp's server closes
// it after every streamed response although its head announced keep-alive), and a request written into a closed
// connection costs a failed attempt and a retry.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <unordered_map>
#include <vector>

#include "net/upstream_stream.h"
#include "prefixgate/types.h"
#include "proxy/address_cache.h"

namespace prefixgate::proxy {

using UpstreamStream = net::UpstreamStream;

class UpstreamPool {
 public:
  UpstreamPool(boost::asio::io_context& io, std::chrono::milliseconds idle_limit);
  // An idle connection to the pod that is still open, or nullptr. Connections idle for longer than the limit, and
  // those the engine has closed (or sent unasked bytes on) since they were pooled, are closed instead; the latter
  // are counted (staleDetected).
  std::unique_ptr<UpstreamStream> take(PodId pod);
  // Returns a connection whose last exchange completed cleanly and which may be reused.
  void give(PodId pod, std::unique_ptr<UpstreamStream> stream);
  // Closes every idle connection (shutdown).
  void clear();
  size_t idleCount() const;
  // Pooled connections found closed by their engine before reuse (no request was lost). Any thread may read.
  uint64_t staleDetected() const { return stale_detected_.load(std::memory_order_relaxed); }
  // Requests written into a pooled connection the engine had closed (the check raced the engine's close), then
  // sent again on a fresh one: counted here by the relay, not against the pod. Any thread may read.
  void countStaleSent() { stale_sent_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t staleSent() const { return stale_sent_.load(std::memory_order_relaxed); }
  // This thread's resolved addresses of host-named pods.
  AddressCache& addresses() { return addresses_; }
  // Starts a periodic sweep that closes connections past the idle limit.
  void startSweeping();
  void stopSweeping();

 private:
  struct Idle {
    std::unique_ptr<UpstreamStream> stream;
    std::chrono::steady_clock::time_point since;
  };
  void sweep();
  boost::asio::steady_timer timer_;
  std::chrono::milliseconds idle_limit_;
  std::unordered_map<uint32_t, std::vector<Idle>> idle_;
  bool sweeping_ = false;
  AddressCache addresses_;
  std::atomic<uint64_t> stale_detected_{0};
  std::atomic<uint64_t> stale_sent_{0};
};

}  // namespace prefixgate::proxy
