#pragma once
// Keep-alive connections to engine pods, one pool per event-loop thread (no locks). Idle connections are closed
// after pool_idle_ms, before vLLM's own 5 s keep-alive timeout can race a reused connection.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <memory>
#include <unordered_map>
#include <vector>

#include "prefixgate/types.h"
#include "proxy/address_cache.h"

namespace prefixgate::proxy {

using UpstreamStream = boost::beast::tcp_stream;

class UpstreamPool {
 public:
  UpstreamPool(boost::asio::io_context& io, std::chrono::milliseconds idle_limit);
  // An idle connection to the pod, or nullptr. Connections idle for longer than the limit are closed instead.
  std::unique_ptr<UpstreamStream> take(PodId pod);
  // Returns a connection whose last exchange completed cleanly and which may be reused.
  void give(PodId pod, std::unique_ptr<UpstreamStream> stream);
  // Closes every idle connection (shutdown).
  void clear();
  size_t idleCount() const;
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
};

}  // namespace prefixgate::proxy
