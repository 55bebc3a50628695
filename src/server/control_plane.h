#pragma once
// The control thread: the admin listener, discovery and health checks. Nothing here is on a request's path.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "discovery/file/pods_file.h"
#include "discovery/health_checker.h"
#include "discovery/kubernetes/kubernetes_source.h"
#include "engine/metrics_scraper.h"
#include "util/polled_file.h"

namespace prefixgate::server {

class Gateway;
class RequestPreparation;

class ControlPlane {
 public:
  explicit ControlPlane(Gateway& gateway);
  Gateway& gateway;
  boost::asio::io_context io{1};
  boost::asio::ip::tcp::acceptor admin_acceptor{io};
  boost::asio::ip::tcp::acceptor health_acceptor{io};  // health_listen: /healthz and /readyz only; closed when off
  boost::asio::signal_set signals{io};
  std::unique_ptr<discovery::FilePodSource> file_source;  // one of these two, as discovery says
  std::unique_ptr<discovery::kubernetes::KubernetesPodSource> kubernetes_source;
  std::vector<std::unique_ptr<util::PolledFile>> credential_files;  // auth.api_keys_file, auth.admin_token_file
  std::unique_ptr<discovery::HealthChecker> health;
  std::unique_ptr<engine::MetricsScraper> scraper;  // engine /metrics -> each pod's EngineLoad
  std::mt19937_64 rng;  // /debug/route decisions; seeded from random_seed (config::SeedPurpose::kControlPlane)
  // /debug/route's dry run of a request's steps; set by Gateway::start before the admin listener opens.
  RequestPreparation* preparation = nullptr;
  std::thread thread;
};

// Accepts admin connections (/metrics, /healthz, /readyz, /debug/*) on the control thread, and probe connections
// on the health listener when it is open.
void startAdmin(ControlPlane& control);

}  // namespace prefixgate::server
