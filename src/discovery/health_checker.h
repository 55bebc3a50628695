#pragma once
// Active health checks: GET /health on every pod each interval; consecutive results move a pod between ready
// and not ready (thresholds from the config), on a connection kept alive between checks (net::KeptConnection: a
// pod that closes it gets a fresh one, and any failure drops it). Runs on a background io_context; never blocks a
// request.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "config/config.h"
#include "net/http_get.h"
#include "discovery/pod_set.h"

namespace prefixgate::discovery {

class HealthChecker {
 public:
  HealthChecker(boost::asio::io_context& io, PodRegistry& registry, config::HealthCheckConfig config);
  // Starts the periodic loop; new pods (registry additions) are checked at once. Call on any thread.
  void start();
  void stop();

 private:
  void tick();
  void check(PodPtr pod);
  boost::asio::io_context& io_;
  PodRegistry& registry_;
  config::HealthCheckConfig config_;
  boost::asio::steady_timer timer_;
  std::unordered_set<uint32_t> checking_;  // pod ids with a check in flight (io thread only)
  net::KeptConnections connections_;  // each pod's, kept alive between rounds (io thread); a round holds its own
  bool stopped_ = false;
};

}  // namespace prefixgate::discovery
