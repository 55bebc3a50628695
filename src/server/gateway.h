#pragma once
// The gateway process: N event-loop threads (one io_context, acceptor and upstream pool each, SO_REUSEPORT),
// plus one control thread for the admin listener, discovery and health checks.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "routing/response_affinity.h"
#include "auth/credentials.h"
#include "config/config.h"
#include "discovery/pod_set.h"
#include "metrics/api_key_metrics.h"
#include "metrics/flow_metrics.h"
#include "metrics/gateway_metrics.h"
#include "routing/router.h"
#include "server/request_body.h"

namespace prefixgate::routing {
class PrefixServices;
class PrefixMetrics;
class KvSync;
class SessionTable;
}  // namespace prefixgate::routing

namespace prefixgate::tokenize {
class RemoteTokenizer;
}

namespace prefixgate::sync {
class StateSync;
}

namespace prefixgate::trace {
class OtlpExporter;
class Tracer;
}  // namespace prefixgate::trace

namespace prefixgate::server {

struct Worker;
struct SessionServices;
class ControlPlane;
class FlowGate;
class RequestPreparation;

class Gateway {
 public:
  explicit Gateway(config::Config config);
  ~Gateway();
  Gateway(const Gateway&) = delete;
  Gateway& operator=(const Gateway&) = delete;

  // Loads the pods, binds the listeners and starts every thread. On failure returns false with `error` set.
  bool start(std::string& error);
  // Blocks until a shutdown has drained (or its grace period ran out) and every thread has stopped.
  void wait();
  // Stops accepting, fails /readyz, lets in-flight requests finish. Thread-safe, idempotent.
  void beginShutdown();

  uint16_t listenPort() const { return listen_port_; }
  uint16_t adminPort() const { return admin_port_; }
  uint16_t healthPort() const { return health_port_; }  // 0 when health_listen is off

 private:
  void drainAndStop();
  std::unique_ptr<tokenize::RemoteTokenizer> makeRemoteTokenizer();
  // prefixgate_remote_tokenizer_breaker_opens_total and _hedges_total, read from remote_tokenizer_ at each scrape.
  void addRemoteTokenizerCounters();
  bool startDiscovery(std::string& error);
  // The exporter's thread, the tracer and prefixgate_trace_* (tracing.otlp_endpoint set).
  void startTracing();
  config::Config config_;
  discovery::PodRegistry pods_;
  metrics::GatewayMetrics metrics_;
  auth::Credentials credentials_;
  metrics::ApiKeyMetrics api_key_metrics_{metrics_.registry()};
  metrics::FlowMetrics flow_metrics_{metrics_.registry()};
  std::unique_ptr<routing::PrefixServices> prefix_;
  std::unique_ptr<routing::PrefixMetrics> prefix_metrics_;
  std::unique_ptr<routing::SessionTable> sessions_;  // session-affinity's pins; before router_, whose strategy uses it
  std::unique_ptr<routing::Router> router_;
  std::unique_ptr<tokenize::RemoteTokenizer> remote_tokenizer_;
  std::unique_ptr<routing::KvSync> kv_sync_;  // KV event sync's subscriber thread; null in standard mode
  std::unique_ptr<sync::StateSync> state_sync_;  // after prefix_ and pods_, which it uses
  // Before workers_: a session the workers' io_contexts destroy still releases its body's charge into it.
  BodyBudget body_budget_{config_.limits.max_buffered_body_bytes};
  // Flow control's queues (flow_control.enabled; else null): before preparation_ and workers_, which use it.
  std::unique_ptr<FlowGate> flow_;
  // The steps before the relay, shared by the workers and /debug/route: after what it uses, before workers_.
  std::unique_ptr<RequestPreparation> preparation_;
  // Chain affinity of the Responses API (response id -> pod), shared by every worker; before session_services_.
  std::unique_ptr<routing::ResponseAffinity> response_affinity_;
  // Tracing (tracing.otlp_endpoint set; else null): the exporter's thread and the requests' tracer, before
  // session_services_ and workers_, whose requests send spans into them.
  std::unique_ptr<trace::OtlpExporter> trace_exporter_;
  std::unique_ptr<trace::Tracer> tracer_;
  std::unique_ptr<SessionServices> session_services_;  // what the workers' sessions use (built after preparation_)
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<ControlPlane> control_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_requests_{0};
  std::atomic<int64_t> open_connections_{0};
  uint16_t listen_port_ = 0;
  uint16_t admin_port_ = 0;
  uint16_t health_port_ = 0;
  std::mutex drain_mutex_;
  std::condition_variable drain_cv_;
  std::thread drain_thread_;
};

}  // namespace prefixgate::server
