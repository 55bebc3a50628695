#pragma once
// The control thread: the admin listener, discovery and health checks. Nothing here is on a request's path.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "discovery/file/pods_file.h"
#include "discovery/health_checker.h"
#include "discovery/kubernetes/kubernetes_source.h"
#include "engine/metrics_scraper.h"
#include "util/polled_file.h"

namespace prefixgate::auth {
class Credentials;
}
namespace prefixgate::config {
struct Config;
}
namespace prefixgate::discovery {
class PodRegistry;
}
namespace prefixgate::metrics {
class GatewayMetrics;
}
namespace prefixgate::routing {
class BytesPerToken;
}
namespace prefixgate::sync {
class StateSync;
}
namespace prefixgate::tokenize {
class RemoteTokenizer;
}

namespace prefixgate::server {

class FlowGate;
class RequestPreparation;

// What the admin handlers read, each given explicitly (the admin listener has no Gateway to reach through). All
// must outlive the control thread.
struct AdminServices {
  const config::Config& config;
  discovery::PodRegistry& pods;
  metrics::GatewayMetrics& metrics;  // /metrics
  const auth::Credentials& credentials;  // the admin token
  const routing::BytesPerToken& bytes_per_token;  // per model, for /debug/pods
  const std::atomic<bool>& draining;  // /readyz fails while draining
  RequestPreparation& preparation;  // /debug/route's dry run of a request's steps
  const sync::StateSync* state_sync = nullptr;  // null: state sync is off
  const tokenize::RemoteTokenizer* remote_tokenizer = nullptr;  // null: the remote tokenizer is off
  const FlowGate* flow = nullptr;  // /debug/queues; null: flow control is off
};

class ControlPlane {
 public:
  // `seed`: the configured random_seed (the control thread's stream of it drives /debug/route's decisions).
  explicit ControlPlane(uint64_t seed);
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
  // Set by Gateway::start once everything they name exists, before the admin listener opens.
  std::optional<AdminServices> admin;
  std::thread thread;
};

// Accepts admin connections (/metrics, /healthz, /readyz, /debug/*) on the control thread, and probe connections
// on the health listener when it is open.
void startAdmin(ControlPlane& control);

}  // namespace prefixgate::server
