#pragma once
// Flow control in the request path (docs/flow-control.md): while no pod of a model has room, its requests wait in
// the gateway, in that model's flow::FairQueue (strict priority between classes, fair sharing by tokens between
// tenants), and each is dispatched the moment a pod has room again. One gate serves every event-loop thread: a
// mutex guards the queues; a queued request sleeps on a timer of its own thread, which a dispatch cancels through
// that thread's executor.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "flow/fair_queue.h"
#include "flow/flow_resolution.h"
#include "flow/service_sharing.h"
#include "openai/errors.h"
#include "prefixgate/types.h"

namespace prefixgate::discovery {
class PodRegistry;
}
namespace prefixgate::metrics {
class FlowMetrics;
}

namespace prefixgate::server {

class FlowGate;

// What a request holds from its admission to its end. Ending it (destruction) gives back a dispatch's room and
// tells its flow it is done (VTC counts its output tokens; straight-through requests are counted too); then the
// model's queue is served again, as the request's in-flight count has gone by then. Move-only.
class FlowPass {
 public:
  FlowPass() = default;
  FlowPass(FlowPass&& other) noexcept { *this = std::move(other); }
  FlowPass& operator=(FlowPass&& other) noexcept;
  ~FlowPass();
  // The request has been routed: its pod counts it in flight, so the room its dispatch held is given back.
  void routed();
  // Output tokens served, and the seconds from sending it to its first response body byte (negative when none
  // came): called once, before the end. Only a stream's first body byte is its first token; a whole answer's comes
  // with its last, so it does not teach the model's first-token time (`streamed` false).
  void served(uint64_t output_tokens, double first_body_seconds, bool streamed) {
    output_tokens_ = output_tokens;
    first_body_seconds_ = streamed ? first_body_seconds : -1;
  }
  bool queued() const { return queued_; }
  // Pods its first routing decision leaves out: a heavy tenant's requests go only to its own pods
  // (flow_control.confine_heavy_tenants); empty for everyone else. A failed-over attempt is not confined.
  const std::vector<PodId>& routeExclude() const { return route_exclude_; }

 private:
  friend class FlowGate;
  void release();
  FlowGate* gate_ = nullptr;
  std::string model_;
  std::string tenant_;  // the flow (kOverflowTenant beyond max_tenants)
  size_t class_index_ = 0;
  bool queued_ = false;    // it waited in the queue (dispatched by popNext)
  bool counted_ = false;   // its flow counts it (dispatched, or admitted straight through): its end is told
  bool reserved_ = false;  // its dispatch holds room until routed()
  uint64_t output_tokens_ = 0;
  int64_t started_ms_ = -1;  // when it passed or was dispatched: its end teaches the model's hold time
  double first_body_seconds_ = -1;  // its pod's time to the first body byte: teaches the model's first-token time
  std::vector<PodId> route_exclude_;
};

// The request being admitted: its flow's sources, its size, and the client connection to watch while it waits.
struct FlowAdmission {
  std::string_view model;
  flow::FlowRequest flow;
  uint64_t prompt_tokens = 0;
  size_t bytes = 0;
  boost::beast::tcp_stream* client = nullptr;     // watched while queued (a hang-up leaves the queue at once)
  boost::beast::flat_buffer* pipelined = nullptr;  // where bytes the client sends meanwhile go (see ClientWatch)
};

struct FlowRefusal {
  openai::GatewayError error = openai::GatewayError::kInvalidRequest;
  std::string message;
  std::string param;
};

class FlowGate final : public flow::ServiceSharing {
 public:
  using Clock = int64_t (*)();  // steady milliseconds
  // `kv_critical`: a busy pod whose engine reports less free KV cache than this fraction has no room
  // (routing.load_balance.kv_critical). `max_engine_age_ms`: engine numbers older than this are not read
  // (engine::maxEngineMetricsAgeMs).
  FlowGate(const flow::FlowConfig& config, uint32_t limits_max_in_flight_per_pod, double kv_critical,
           int64_t max_engine_age_ms, const discovery::PodRegistry& pods, metrics::FlowMetrics& metrics,
           Clock now_ms);
  ~FlowGate();
  FlowGate(const FlowGate&) = delete;
  FlowGate& operator=(const FlowGate&) = delete;

  bool enabled() const { return config_.enabled; }
  // Resolves the request's flow (a bad header: refusal), then lets it through at once while the model's pods have
  // room and nobody waits before it; else queues it until it is dispatched (returns nullopt, `pass` set), shed by
  // a bound or its deadline (refusal), or its client leaves (kClientGone). Off: nullopt at once.
  boost::asio::awaitable<std::optional<FlowRefusal>> admit(const FlowAdmission& request, FlowPass& pass);
  // Dispatches what the model's pods have room for now.
  void serve(const std::string& model);
  // /debug/queues: per model, its classes and tenants (queued, bytes, counter, in flight), room and reservations.
  nlohmann::json snapshot() const;

  // Replicas (flow::ServiceSharing, fed by state sync): per model, the service its queue gave each flow here, at
  // most `max_flows` in all, shared between the models in turn; and other replicas' service, charged to the flows
  // tracked here by class name (unknown models, classes and flows are skipped; no queue is created). Any thread.
  std::vector<flow::ModelService> localService(size_t max_flows) const override;
  void chargeRemote(const std::vector<flow::RemoteService>& charges) override;

 private:
  friend class FlowPass;
  struct Waiter;
  struct ModelQueue;
  ModelQueue& queueFor(const std::string& model);  // under mutex_
  // The model's ready pods as admission predicts with them: the requests they hold at once (the per-pod limit
  // each), and the soonest any of them answers once sent (the fastest learned ServiceRates base; 0 when none has
  // learned one yet).
  struct FleetView {
    int64_t capacity = 0;
    double first_token_ms = 0;
  };
  FleetView fleetView(const std::string& model) const;
  // The most requests one tenant may hold in flight while another tenant is active (flow_control.max_tenant_share
  // of the model's capacity, at least 1); INT64_MAX when the share is 1 (no limit). Under mutex_.
  int64_t tenantLimit(const std::string& model) const;
  static bool overShare(const flow::FairQueue& queue, const std::string& tenant, int64_t limit) {
    return static_cast<int64_t>(queue.tenantInFlight(tenant)) >= limit && queue.othersActive(tenant);
  }
  // Requests the model's ready pods could take now beyond those already dispatched and not yet routed; the pods are
  // read only until that reaches `enough`. A pod has no room at its limit, when its engine queues
  // max_engine_waiting, or when it is busy with its KV cache critical (free fraction below kv_critical: the engine
  // would preempt; a pod with nothing in flight always has room, so a stuck KV figure cannot stall the queue for
  // good). A disaggregated model's request needs a prefill pod and then a decode
  // pod: its room is the smaller of the two sides' (pods of role both count on each).
  int64_t room(const std::string& model, const ModelQueue& queue,
               int64_t enough = std::numeric_limits<int64_t>::max()) const;
  void serveLocked(const std::string& model, ModelQueue& queue);
  // flow_control.confine_heavy_tenants: when `tenant` holds at least half of `limit` (its share) while another
  // tenant is active, the model's ready pods outside its own fewest that hold the share (ranked by a rendezvous
  // hash of tenant and pod name) go into `pass`'s routeExclude(). Under mutex_.
  void confine(const ModelQueue& queue, const std::string& model, const std::string& tenant, int64_t limit,
               FlowPass& pass) const;
  void done(FlowPass& pass);

  flow::FlowConfig config_;
  std::vector<flow::ClassSpec> classes_;
  uint32_t pod_limit_;  // flow_control.max_in_flight_per_pod, else limits.max_in_flight_per_pod
  double kv_critical_;
  int64_t max_engine_age_ms_;
  const discovery::PodRegistry& pods_;
  metrics::FlowMetrics& metrics_;
  Clock now_ms_;
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<ModelQueue>, std::less<>> queues_;  // models pods serve: bounded
  std::unordered_map<uint64_t, std::shared_ptr<Waiter>> waiters_;
  uint64_t next_id_ = 1;
};

}  // namespace prefixgate::server
