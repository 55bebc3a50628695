#include "server/flow_gate.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "discovery/pod_set.h"
#include "flow/admission_estimate.h"
#include "metrics/flow_metrics.h"
#include "proxy/upstream_attempt.h"

namespace prefixgate::server {

namespace asio = boost::asio;

namespace {
// A queued request also looks for room on its own this often: room can appear without a request of this gateway
// ending (another replica's requests end, a pod becomes ready, an engine's queue drains).
constexpr int64_t kRecheckMs = 200;
// The tenant label of the flow metrics: API key names only (bounded by the keys file).
std::string tenantLabel(const flow::FlowRequest& request) {
  return request.api_key_name.empty() ? std::string("-") : std::string(request.api_key_name);
}
}  // namespace

struct FlowGate::Waiter {
  explicit Waiter(const asio::any_io_executor& executor) : timer(executor) {}
  asio::steady_timer timer;  // cancelled (through its executor) by a dispatch or the client's hang-up
  bool dispatched = false;   // under the gate's mutex
  std::string class_name;
  std::string tenant_label;
  int64_t enqueued_ms = 0;
};

struct FlowGate::ModelQueue {
  explicit ModelQueue(const flow::FlowConfig& config) : queue(config) {}
  flow::FairQueue queue;
  int64_t reserved = 0;  // dispatched, not yet routed: room they will take
  flow::RecentMean hold;         // how long its requests keep their room
  flow::RecentMean first_token;  // how long a pod takes to its first body byte once a request is sent
};

FlowPass& FlowPass::operator=(FlowPass&& other) noexcept {
  if (this == &other) return *this;
  release();
  gate_ = std::exchange(other.gate_, nullptr);
  model_ = std::move(other.model_);
  tenant_ = std::move(other.tenant_);
  class_index_ = other.class_index_;
  queued_ = other.queued_;
  counted_ = other.counted_;
  reserved_ = std::exchange(other.reserved_, false);
  output_tokens_ = other.output_tokens_;
  first_body_seconds_ = other.first_body_seconds_;
  started_ms_ = other.started_ms_;
  route_exclude_ = std::move(other.route_exclude_);
  return *this;
}

FlowPass::~FlowPass() { release(); }

void FlowPass::routed() {
  if (!gate_ || !reserved_) return;
  std::lock_guard lock(gate_->mutex_);
  if (auto it = gate_->queues_.find(model_); it != gate_->queues_.end()) --it->second->reserved;
  reserved_ = false;
}

void FlowPass::release() {
  if (FlowGate* gate = std::exchange(gate_, nullptr)) gate->done(*this);
}

FlowGate::FlowGate(const flow::FlowConfig& config, uint32_t limits_max_in_flight_per_pod, double kv_critical,
                   int64_t max_engine_age_ms, const discovery::PodRegistry& pods, metrics::FlowMetrics& metrics,
                   Clock now_ms)
    : config_(config),
      classes_(flow::classesOf(config)),
      pod_limit_(config.max_in_flight_per_pod > 0 ? config.max_in_flight_per_pod : limits_max_in_flight_per_pod),
      kv_critical_(kv_critical),
      max_engine_age_ms_(max_engine_age_ms),
      pods_(pods),
      metrics_(metrics),
      now_ms_(now_ms) {}

FlowGate::~FlowGate() = default;

FlowGate::ModelQueue& FlowGate::queueFor(const std::string& model) {
  auto it = queues_.find(model);
  if (it == queues_.end()) it = queues_.emplace(model, std::make_unique<ModelQueue>(config_)).first;
  return *it->second;
}

int64_t FlowGate::room(const std::string& model, const ModelQueue& queue, int64_t enough) const {
  auto snapshot = pods_.snapshot();
  const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(model);
  if (!serving) return 1;  // no pod serves it (any more): routing refuses it at once
  const bool split = snapshot->disaggregated(model);
  const int64_t now = now_ms_();
  int64_t prefill = 0;  // a disaggregated model's prefill side (prefill and both pods)
  int64_t total = 0;    // every pod, or a disaggregated model's decode side (decode and both pods)
  bool any = false;
  for (const discovery::PodPtr& pod : *serving) {
    if (!pod->ready(now)) continue;
    any = true;
    const int32_t in_flight = pod->signals().inFlightAllReplicas();
    if (config_.max_engine_waiting > 0 || (kv_critical_ > 0 && in_flight > 0)) {
      const engine::EngineLoadView view = pod->engine().view();
      if (view.fresh(now, max_engine_age_ms_)) {
        if (config_.max_engine_waiting > 0 && !std::isnan(view.waiting) &&
            view.waiting >= static_cast<double>(config_.max_engine_waiting))
          continue;
        if (kv_critical_ > 0 && in_flight > 0 && !std::isnan(view.kv_usage) && 1 - view.kv_usage < kv_critical_)
          continue;
      }
    }
    const int64_t free = std::max<int64_t>(0, int64_t{pod_limit_} - in_flight);
    if (split) {
      const PodRole role = pod->spec().role;
      if (role != PodRole::kDecode) prefill += free;
      if (role != PodRole::kPrefill) total += free;
      continue;
    }
    total += free;
    if (total - queue.reserved >= enough) return total - queue.reserved;  // the caller needs no more
  }
  // No ready pod: nothing frees up by waiting here, and routing answers at once (503).
  if (!any) return 1;
  if (split) total = std::min(total, prefill);
  return total - queue.reserved;
}

FlowGate::FleetView FlowGate::fleetView(const std::string& model) const {
  FleetView view;
  auto snapshot = pods_.snapshot();
  const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(model);
  if (!serving) return view;
  const int64_t now = now_ms_();
  double fastest = -1;
  for (const discovery::PodPtr& pod : *serving) {
    if (!pod->ready(now)) continue;
    view.capacity += pod_limit_;
    const routing::ServiceRates::Rates rates = pod->signals().rates().read();
    if (rates.samples == 0) continue;  // the defaults are another fleet's: predict nothing from them
    if (fastest < 0 || rates.base_s < fastest) fastest = rates.base_s;
  }
  view.first_token_ms = fastest < 0 ? 0 : fastest * 1000.0;
  return view;
}

int64_t FlowGate::tenantLimit(const std::string& model) const {
  if (config_.max_tenant_share >= 1) return std::numeric_limits<int64_t>::max();
  const auto capacity = static_cast<double>(fleetView(model).capacity);
  return std::max<int64_t>(1, static_cast<int64_t>(config_.max_tenant_share * capacity));
}

namespace {

// A pod's rank for a tenant (rendezvous hashing): each tenant orders the pods its own way, the same on every replica
// and unchanged for the other pods when one comes or goes.
uint64_t rendezvousRank(std::string_view tenant, std::string_view pod) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over tenant, a separator, pod; then a finalising mix
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ULL;
  };
  mix(tenant);
  h = (h ^ 0xff) * 1099511628211ULL;
  mix(pod);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

}  // namespace

void FlowGate::confine(const ModelQueue& mq, const std::string& model, const std::string& tenant, int64_t limit,
                       FlowPass& pass) const {
  pass.route_exclude_.clear();
  if (!config_.confine_heavy_tenants || limit == std::numeric_limits<int64_t>::max() || pod_limit_ == 0) return;
  if (!mq.queue.othersActive(tenant) || 2 * static_cast<int64_t>(mq.queue.tenantInFlight(tenant)) < limit) return;
  auto snapshot = pods_.snapshot();
  if (snapshot->disaggregated(model)) return;  // its legs are routed by role: no confinement
  const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(model);
  if (!serving) return;
  const int64_t now = now_ms_();
  std::vector<std::pair<uint64_t, PodId>> ranked;
  ranked.reserve(serving->size());
  for (const discovery::PodPtr& pod : *serving)
    if (pod->ready(now)) ranked.emplace_back(rendezvousRank(tenant, pod->name()), pod->id());
  const auto own = static_cast<size_t>((limit + pod_limit_ - 1) / pod_limit_);  // the fewest pods that hold the share
  if (ranked.size() <= own) return;
  std::nth_element(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(own), ranked.end());
  pass.route_exclude_.reserve(ranked.size() - own);
  for (size_t i = own; i < ranked.size(); ++i) pass.route_exclude_.push_back(ranked[i].second);
}

void FlowGate::serveLocked(const std::string& model, ModelQueue& mq) {
  if (mq.queue.size() == 0) return;
  int64_t available = room(model, mq);
  if (available <= 0) return;
  const int64_t limit = tenantLimit(model);
  const flow::FairQueue& queue = mq.queue;
  auto within_share = [&](const std::string& tenant) { return !overShare(queue, tenant, limit); };
  while (available > 0) {
    std::optional<flow::QueuedItem> item =
        limit == std::numeric_limits<int64_t>::max() ? mq.queue.popNext() : mq.queue.popNext(within_share);
    if (!item) return;
    auto it = waiters_.find(item->id);
    if (it == waiters_.end()) {  // never happens: every queued item has its waiter until it leaves
      mq.queue.finished(item->tenant, item->class_index);
      continue;
    }
    std::shared_ptr<Waiter> waiter = std::move(it->second);
    waiters_.erase(it);
    waiter->dispatched = true;
    ++mq.reserved;
    --available;
    metrics_.queued(waiter->class_name, -1);
    metrics_.dispatched(waiter->class_name, waiter->tenant_label,
                        static_cast<double>(now_ms_() - waiter->enqueued_ms) / 1000.0);
    // The waiter's own thread wakes it: its timer is touched only there.
    asio::post(waiter->timer.get_executor(), [waiter] { waiter->timer.cancel(); });
  }
}

void FlowGate::serve(const std::string& model) {
  std::lock_guard lock(mutex_);
  if (auto it = queues_.find(model); it != queues_.end()) serveLocked(model, *it->second);
}

void FlowGate::done(FlowPass& pass) {
  std::lock_guard lock(mutex_);
  auto it = queues_.find(pass.model_);
  if (it == queues_.end()) return;
  ModelQueue& mq = *it->second;
  if (pass.reserved_) --mq.reserved;
  pass.reserved_ = false;
  if (pass.started_ms_ >= 0) mq.hold.add(static_cast<double>(now_ms_() - pass.started_ms_));
  if (pass.first_body_seconds_ >= 0) mq.first_token.add(pass.first_body_seconds_ * 1000.0);
  if (pass.counted_) {
    mq.queue.charge(pass.tenant_, pass.class_index_, pass.output_tokens_);
    mq.queue.finished(pass.tenant_, pass.class_index_);
  }
  serveLocked(pass.model_, mq);
}

asio::awaitable<std::optional<FlowRefusal>> FlowGate::admit(const FlowAdmission& request, FlowPass& pass) {
  if (!config_.enabled) co_return std::nullopt;
  flow::ResolvedFlow resolved = flow::resolveFlow(request.flow, config_);
  if (!resolved.error.empty())
    co_return FlowRefusal{openai::GatewayError::kInvalidRequest, std::move(resolved.error), {}};
  const std::string model(request.model);
  // A model no pod serves is refused by routing (404); its name is the client's, so it gets no queue.
  if (pods_.snapshot()->podsFor(model) == nullptr) co_return std::nullopt;
  const int64_t now = now_ms_();
  int64_t deadline = now + int64_t{classes_[resolved.class_index].max_wait_ms};
  // A request still queued when its TTFT objective has passed can no longer meet it.
  const bool objective_first = resolved.ttft_slo_ms > 0 && now + int64_t{resolved.ttft_slo_ms} < deadline;
  if (objective_first) deadline = now + resolved.ttft_slo_ms;

  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  std::shared_ptr<Waiter> waiter;
  uint64_t id = 0;
  pass = FlowPass();
  pass.gate_ = this;
  pass.model_ = model;
  pass.class_index_ = resolved.class_index;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    ModelQueue& mq = queueFor(model);
    // Straight through while there is room and nobody waits before it: the pods are read only until one with room
    // is found, and nothing is allocated but a new tenant's flow. A tenant at its share while others are active
    // waits even when a pod has room (flow_control.max_tenant_share); with no share configured this reads nothing
    // more.
    if (mq.queue.size() == 0 && room(model, mq, 1) > 0 &&
        (config_.max_tenant_share >= 1 || mq.queue.tenantInFlight(resolved.tenant) == 0 ||
         !overShare(mq.queue, resolved.tenant, tenantLimit(model)))) {
      // Counted by its flow all the same (its prompt now, its output at the end), so a tenant whose burst took the
      // free slots is charged for them once others queue.
      pass.tenant_ = mq.queue.admitDirect(resolved.tenant, resolved.class_index, request.prompt_tokens);
      pass.counted_ = true;
      pass.started_ms_ = now;
      if (config_.max_tenant_share < 1) confine(mq, model, pass.tenant_, tenantLimit(model), pass);
      co_return std::nullopt;
    }
    waiter = std::make_shared<Waiter>(executor);
    waiter->class_name = classes_[resolved.class_index].name;
    waiter->tenant_label = tenantLabel(request.flow);
    waiter->enqueued_ms = now;
    if (resolved.ttft_slo_ms > 0) {
      // Shed at once a request that cannot meet its objective even if it goes as soon as it possibly could (the
      // requests certainly before it end at the learned rate, then the fastest pod answers); else wait only while
      // the objective can still be met once sent.
      const FleetView fleet = fleetView(model);
      const double wait = flow::predictedQueueWaitMs(mq.queue.queuedAhead(resolved.tenant, resolved.class_index),
                                                     room(model, mq), fleet.capacity, mq.hold.ms());
      const flow::ObjectiveCheck check = flow::checkObjective(resolved.ttft_slo_ms, wait, fleet.first_token_ms,
                                                                mq.first_token.ms());
      if (!check.reachable) {
        metrics_.shed("objective_predicted", waiter->class_name, waiter->tenant_label);
        pass.gate_ = nullptr;  // nothing to give back
        co_return FlowRefusal{openai::GatewayError::kObjectiveUnreachable,
                              "the request cannot meet its TTFT objective (" + std::to_string(resolved.ttft_slo_ms) +
                                  " ms): predicted at least " + std::to_string(std::lround(check.predicted_ms)) +
                                  " ms (" + std::to_string(std::lround(wait)) + " ms queued behind the requests "
                                  "before it, then " + std::to_string(std::lround(fleet.first_token_ms)) +
                                  " ms on the fastest pod); retry later",
                              {}};
      }
      // At least 1 ms: a budget spent already leaves it the room that frees now, then the `objective` shed.
      if (objective_first)
        deadline = std::min(deadline, now + std::max<int64_t>(1, static_cast<int64_t>(check.queue_budget_ms)));
    }
    flow::EnqueueResult result = mq.queue.enqueue(
        {id, std::move(resolved.tenant), resolved.class_index, request.bytes, request.prompt_tokens, now, deadline});
    pass.tenant_ = result.flow;
    if (!result.queued()) {
      metrics_.shed(result.reasonLabel(), waiter->class_name, waiter->tenant_label);
      pass.gate_ = nullptr;  // nothing to give back
      const bool quota = *result.shed == flow::ShedReason::kTenantQueueFull;
      co_return FlowRefusal{quota ? openai::GatewayError::kTenantQueueFull : openai::GatewayError::kQueueFull,
                            quota ? "the tenant '" + result.flow + "' has as many requests queued as "
                                        "flow_control.max_queued_per_tenant (or its bytes) allows; retry later"
                                  : std::string("the gateway's flow-control queue is full "
                                                "(flow_control.max_queued_total or its bytes); retry later"),
                            {}};
    }
    metrics_.queued(waiter->class_name, 1);
    waiters_.emplace(id, waiter);
    serveLocked(model, mq);
  }

  auto watch = std::make_shared<proxy::ClientWatch>();
  watch->pipelined = request.pipelined;
  watch->waiter = &waiter->timer;
  if (request.client) proxy::watchClient(*request.client, watch);
  std::string_view shed;
  while (true) {
    {
      std::lock_guard lock(mutex_);
      if (waiter->dispatched) break;
      if (watch->gone || now_ms_() >= deadline) {
        ModelQueue& mq = queueFor(model);
        mq.queue.cancel(id);
        waiters_.erase(id);
        metrics_.queued(waiter->class_name, -1);
        shed = watch->gone ? "client_gone" : objective_first ? "objective" : "timeout";
        break;
      }
      serveLocked(model, queueFor(model));
      if (waiter->dispatched) break;
    }
    const int64_t wait = std::min(deadline - now_ms_(), kRecheckMs);
    waiter->timer.expires_after(std::chrono::milliseconds(std::max<int64_t>(wait, 0)));
    boost::system::error_code ec;
    co_await waiter->timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  // The relay watches the client again from its own start: this watch's read must not outlive the wait.
  watch->done = true;
  watch->waiter = nullptr;
  if (request.client) {
    boost::system::error_code ignored;
    request.client->socket().cancel(ignored);
  }
  if (shed.empty()) {
    pass.queued_ = true;
    pass.counted_ = true;
    pass.reserved_ = true;
    pass.started_ms_ = now_ms_();
    if (config_.max_tenant_share < 1) {
      std::lock_guard lock(mutex_);
      if (auto it = queues_.find(model); it != queues_.end()) confine(*it->second, model, pass.tenant_, tenantLimit(model), pass);
    }
    co_return std::nullopt;
  }
  pass.gate_ = nullptr;  // it left the queue: nothing dispatched, nothing to give back
  metrics_.shed(shed, waiter->class_name, waiter->tenant_label);
  if (shed == "client_gone")
    co_return FlowRefusal{openai::GatewayError::kClientGone, "the client left while its request was queued", {}};
  co_return FlowRefusal{openai::GatewayError::kQueueTimeout,
                        shed == "objective"
                            ? "the request waited in the flow-control queue past its TTFT objective ("
                                  + std::to_string(resolved.ttft_slo_ms) + " ms); retry later"
                            : "the request waited in the flow-control queue longer than its class's max_wait_ms ("
                                  + std::to_string(classes_[resolved.class_index].max_wait_ms) + " ms); retry later",
                        {}};
}

nlohmann::json FlowGate::snapshot() const {
  nlohmann::json out = nlohmann::json::object();
  out["enabled"] = config_.enabled;
  nlohmann::json models = nlohmann::json::object();
  std::lock_guard lock(mutex_);
  for (const auto& [model, mq] : queues_) {
    const flow::QueueSnapshot s = mq->queue.snapshot();
    nlohmann::json m;
    const int64_t room_now = room(model, *mq);
    m["room"] = room_now;
    m["saturated"] = room_now <= 0;
    m["reserved"] = mq->reserved;
    const int64_t tenant_limit = tenantLimit(model);
    if (tenant_limit != std::numeric_limits<int64_t>::max()) m["tenant_limit"] = tenant_limit;
    m["hold_ms"] = mq->hold.ms();  // how long a request keeps its room (0 until learned): admission's predictions
    m["first_token_ms"] = mq->first_token.ms();  // the typical time to a first token once sent (0 until learned)
    m["queued"] = s.queued;
    m["bytes"] = s.bytes;
    m["tenants_tracked"] = s.tenants_tracked;
    nlohmann::json classes = nlohmann::json::array();
    for (const flow::ClassSnapshot& c : s.classes) {
      nlohmann::json tenants = nlohmann::json::array();
      for (const flow::TenantSnapshot& t : c.tenants)
        tenants.push_back({{"tenant", t.tenant}, {"queued", t.queued}, {"bytes", t.bytes}, {"counter", t.counter},
                           {"in_flight", t.in_flight}});
      classes.push_back({{"name", c.name}, {"queued", c.queued}, {"bytes", c.bytes}, {"tenants", tenants}});
    }
    m["classes"] = std::move(classes);
    models[model] = std::move(m);
  }
  out["models"] = std::move(models);
  return out;
}

std::vector<flow::ModelService> FlowGate::localService(size_t max_flows) const {
  std::lock_guard lock(mutex_);
  std::vector<std::vector<flow::LocalService>> served;
  for (const auto& [model, mq] : queues_) served.push_back(mq->queue.localService(max_flows));
  // In turns, one flow of each model a round, so that one model's many tenants do not leave the others unshared.
  std::vector<flow::ModelService> out;
  std::vector<size_t> slot(served.size(), 0);  // where model i is in `out`, once it has a flow there
  std::vector<size_t> taken(served.size(), 0);
  size_t listed = 0;
  for (bool more = true; more && listed < max_flows;) {
    more = false;
    size_t i = 0;
    for (auto it = queues_.begin(); it != queues_.end() && listed < max_flows; ++it, ++i) {
      if (taken[i] >= served[i].size()) continue;
      more = true;
      if (taken[i] == 0) {
        slot[i] = out.size();
        out.push_back(flow::ModelService{it->first, it->second->queue.flowsCreated(), {}});
      }
      const flow::LocalService& local = served[i][taken[i]++];
      out[slot[i]].flows.push_back(
          flow::FlowService{classes_[local.class_index].name, local.tenant, local.total, local.flow_seq});
      ++listed;
    }
  }
  return out;
}

void FlowGate::chargeRemote(const std::vector<flow::RemoteService>& charges) {
  std::lock_guard lock(mutex_);
  for (const flow::RemoteService& charge : charges) {
    auto queue = queues_.find(charge.model);
    if (queue == queues_.end()) continue;
    auto spec = std::find_if(classes_.begin(), classes_.end(),
                             [&](const flow::ClassSpec& c) { return c.name == charge.class_name; });
    if (spec == classes_.end()) continue;
    queue->second->queue.chargeRemote(charge.tenant, static_cast<size_t>(spec - classes_.begin()), charge.amount);
  }
  // A charge only reorders what waits; it frees no room, so there is nothing to dispatch here.
}

}  // namespace prefixgate::server
