#pragma once
// The pods the gateway can route to: an immutable snapshot swapped atomically by discovery, and per-pod live
// state (in-flight count, health) that outlives snapshots so counters survive a pods-file reload.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "discovery/kv_sync_state.h"
#include "discovery/passive_ejection.h"
#include "discovery/service_rates.h"
#include "engine/engine_load.h"
#include "prefixgate/types.h"

namespace prefixgate::discovery {

struct PodSpec {
  std::string name;     // unique
  std::string address;  // HOST:PORT of the engine's OpenAI HTTP server
  std::string host;
  uint16_t port = 0;
  std::vector<std::string> models;
  std::string kv_events;  // optional tcp:// endpoint of the KV event publisher
  std::string kv_replay;
  uint64_t kv_capacity_tokens = 0;  // optional: the engine's KV cache size in tokens (0 = from its metrics)
  uint32_t data_parallel_size = 1;  // data-parallel ranks; rank r publishes KV events on kv_events' port + r
  engine::EngineKind engine = engine::EngineKind::kAuto;  // its dialect; kAuto = recognised from its /metrics
  bool operator==(const PodSpec&) const = default;
  // A pod is its name and its address: an entry that keeps both is the same pod, whatever else changed.
  bool sameIdentity(const PodSpec& o) const { return name == o.name && address == o.address; }
};

// The fields (by their config key) in which two specs of one pod differ, e.g. "models, kv_capacity_tokens".
std::string changedFields(const PodSpec& before, const PodSpec& after);

// The prediction audit of one pod (routing/prediction_audit.h): what prefix strategies predicted it held in its KV
// cache against what its engine reported, summed over the audited responses. Request threads add, /debug/pods
// reads; each sum is its own atomic, so a read during an add may see part of it (never a torn number).
class PredictionTotals {
 public:
  struct Sums {
    uint64_t responses = 0;
    uint64_t predicted_tokens = 0;
    uint64_t engine_cached_tokens = 0;
    uint64_t over_predicted_tokens = 0;   // sum of max(predicted - engine, 0)
    uint64_t under_predicted_tokens = 0;  // sum of max(engine - predicted, 0)
    // 1 - sum|predicted - engine| / sum max(predicted, engine); empty before any audited response; 1 when both
    // sides were always 0. (sum max(p, e) = engine + over.)
    std::optional<double> accuracy() const {
      if (responses == 0) return std::nullopt;
      const double base = static_cast<double>(engine_cached_tokens + over_predicted_tokens);
      if (base == 0) return 1.0;
      return 1.0 - static_cast<double>(over_predicted_tokens + under_predicted_tokens) / base;
    }
  };
  void add(uint64_t predicted_tokens, uint64_t engine_cached_tokens) {
    responses_.fetch_add(1, std::memory_order_relaxed);
    predicted_.fetch_add(predicted_tokens, std::memory_order_relaxed);
    engine_.fetch_add(engine_cached_tokens, std::memory_order_relaxed);
    if (predicted_tokens > engine_cached_tokens)
      over_.fetch_add(predicted_tokens - engine_cached_tokens, std::memory_order_relaxed);
    else
      under_.fetch_add(engine_cached_tokens - predicted_tokens, std::memory_order_relaxed);
  }
  Sums sums() const {
    return {responses_.load(std::memory_order_relaxed), predicted_.load(std::memory_order_relaxed),
            engine_.load(std::memory_order_relaxed), over_.load(std::memory_order_relaxed),
            under_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<uint64_t> responses_{0};
  std::atomic<uint64_t> predicted_{0};
  std::atomic<uint64_t> engine_{0};
  std::atomic<uint64_t> over_{0};
  std::atomic<uint64_t> under_{0};
};

// Time to first byte of one pod as the gateway measured it (request start to the engine's first response byte),
// for least-latency: an EWMA (each sample weighs kWeight against the past), with the time of the last sample.
// Every response adds one sample, whatever the strategy, so it takes no lock: the EWMA is updated by compare and
// swap (concurrent samples each land once), and a reader that sees samples > 0 sees the EWMA they were folded into.
class LatencyEstimate {
 public:
  struct Sample {
    double seconds = 0;     // the EWMA; meaningless when samples == 0
    int64_t last_ms = 0;    // steady clock, when the last sample was added
    uint64_t samples = 0;
  };
  static constexpr double kWeight = 0.2;  // the last ~5 responses dominate
  void add(double seconds, int64_t now_ms) {
    double old = seconds_.load(std::memory_order_relaxed);
    while (!seconds_.compare_exchange_weak(old, std::isnan(old) ? seconds : kWeight * seconds + (1 - kWeight) * old,
                                           std::memory_order_relaxed)) {
    }
    last_ms_.store(now_ms, std::memory_order_relaxed);
    samples_.fetch_add(1, std::memory_order_release);
  }
  Sample read() const {
    const uint64_t samples = samples_.load(std::memory_order_acquire);
    return {seconds_.load(std::memory_order_relaxed), last_ms_.load(std::memory_order_relaxed), samples};
  }

 private:
  std::atomic<double> seconds_{std::numeric_limits<double>::quiet_NaN()};  // NaN until the first sample
  std::atomic<int64_t> last_ms_{0};
  std::atomic<uint64_t> samples_{0};
};

// Live state of one pod. Shared (by shared_ptr) between the snapshots that list it and the requests in flight
// to it, so a request always decrements the object it incremented, even after the pod left the set.
class PodState {
 public:
  PodState(PodId id, PodSpec spec);
  PodId id() const { return id_; }
  // The pod's current spec. A reference stays valid for the pod's life (replaced versions are kept), so a caller
  // may hold it across a wait; a new read sees an edit made since.
  const PodSpec& spec() const { return *spec_.load(std::memory_order_acquire); }
  const std::string& name() const { return spec().name; }
  // Replaces the spec in place (the same name and address: sameIdentity), keeping the pod's id and live state.
  // Returns false, changing nothing, when kMaxSpecVersions versions exist: the registry then replaces the pod, so
  // that the versions kept for readers stay bounded. Called by PodRegistry::update only (serialized).
  bool updateSpec(PodSpec spec);
  static constexpr size_t kMaxSpecVersions = 64;

  int32_t inFlight() const { return in_flight_.load(std::memory_order_relaxed); }
  // `tokens`: the request's prompt tokens (its context), summed in inFlightTokens while it is in flight.
  void addInFlight(int64_t tokens = 0) {
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    routed_.fetch_add(1, std::memory_order_relaxed);
    if (tokens != 0) in_flight_tokens_.fetch_add(tokens, std::memory_order_relaxed);
  }
  void releaseInFlight(int64_t tokens = 0) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    if (tokens != 0) in_flight_tokens_.fetch_sub(tokens, std::memory_order_relaxed);
  }
  // The prompt tokens of this gateway's requests in flight to the pod (prefill-cost's decode term).
  int64_t inFlightTokens() const { return in_flight_tokens_.load(std::memory_order_relaxed); }
  // This gateway's requests sent to the pod whose first response byte has not come yet (the engine is queueing or
  // prefilling them), and the prompt tokens they were predicted to miss in its cache: the prefill work ahead of
  // the next request (PrefillGuard counts them).
  int32_t prefillRequests() const { return prefill_requests_.load(std::memory_order_relaxed); }
  int64_t prefillTokens() const { return prefill_tokens_.load(std::memory_order_relaxed); }
  void addPrefill(int64_t tokens) {
    prefill_requests_.fetch_add(1, std::memory_order_relaxed);
    prefill_tokens_.fetch_add(tokens, std::memory_order_relaxed);
  }
  void releasePrefill(int64_t tokens) {
    prefill_requests_.fetch_sub(1, std::memory_order_relaxed);
    prefill_tokens_.fetch_sub(tokens, std::memory_order_relaxed);
  }
  // With state sync: the other live replicas' in-flight requests to this pod as last read from Redis (0 when sync
  // is off, or Redis has not answered for longer than a replica's heartbeat lives), and how many other replicas
  // there were. The read is up to one load interval old; setRemoteInFlight notes this gateway's routed count then.
  int32_t remoteInFlight() const { return remote_in_flight_.load(std::memory_order_relaxed); }
  void setRemoteInFlight(int32_t n, int32_t other_replicas) {
    routed_at_read_.store(routed_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    other_replicas_.store(other_replicas, std::memory_order_relaxed);
    remote_in_flight_.store(n, std::memory_order_relaxed);
  }
  // What routing weighs: this gateway's count (exact, counted at the moment of choice) plus the others' as last
  // read, plus, for each other replica, as many requests as this one has sent the pod since that read. Replicas
  // deciding on the same old view tend to make the same choices (and pile onto the pod that looked idle to all):
  // assuming each did what this one did since the read spreads them as if the view were current (symmetric
  // replicas behind one Service get alike traffic). Without sync it is the local count.
  int32_t inFlightAllReplicas() const {
    const int32_t others = other_replicas_.load(std::memory_order_relaxed);
    const auto since = static_cast<int32_t>(routed_.load(std::memory_order_relaxed) -
                                            routed_at_read_.load(std::memory_order_relaxed));
    return inFlight() + remoteInFlight() + others * since;
  }

  // Ready = the last active health checks passed and no passive ejection is in force now.
  bool ready(int64_t now_ms) const {
    return healthy_.load(std::memory_order_relaxed) && !removed_.load(std::memory_order_relaxed) &&
           now_ms >= ejected_until_ms_.load(std::memory_order_relaxed);
  }
  bool healthy() const { return healthy_.load(std::memory_order_relaxed); }
  bool removed() const { return removed_.load(std::memory_order_relaxed); }
  bool checked() const { return checked_.load(std::memory_order_relaxed); }
  int64_t ejectedUntilMs() const { return ejected_until_ms_.load(std::memory_order_relaxed); }

  // Health-check results (called from the health checker only); thresholds are consecutive counts.
  void recordHealth(bool ok, uint32_t healthy_threshold, uint32_t unhealthy_threshold);
  // Keeps new requests away until `until_ms`.
  void eject(int64_t until_ms) { ejected_until_ms_.store(until_ms, std::memory_order_relaxed); }
  // Passive health from the relay (through proxy::PodHealth), policy in PassiveEjection. Each failure returns true
  // when the pod should now be ejected; the caller decides (health_check.max_ejection_percent) and calls
  // ejectPassively. Thread-safe; a success on a pod with no streak takes no lock.
  bool recordPodFailure(const config::HealthCheckConfig& config);
  bool recordRequestFailure(uint64_t request_hash, const config::HealthCheckConfig& config);
  void recordSuccess();
  // Keeps new requests away for the policy's next back-off from `now_ms`.
  void ejectPassively(int64_t now_ms, const config::HealthCheckConfig& config);
  // Passive ejections in a row (reset by a success).
  uint32_t ejections() const;
  void markRemoved() { removed_.store(true, std::memory_order_relaxed); }

  // The dialect the gateway speaks to the pod's engine: the configured one, else the one its /metrics page was
  // recognised as (kAuto until the first page that names one). Lock-free.
  engine::EngineKind engineKind() const {
    const engine::EngineKind configured = spec().engine;
    return configured != engine::EngineKind::kAuto ? configured : engine_.detectedKind();
  }
  // Engine-reported load and measured capacity (scraper and relays write, strategies read).
  engine::EngineLoad& engine() { return engine_; }
  const engine::EngineLoad& engine() const { return engine_; }

  // KV event sync's view of the pod's publisher (subscriber and relays write, routing reads).
  KvSyncState& kvSync() { return kv_sync_; }
  const KvSyncState& kvSync() const { return kv_sync_; }
  // Time to first byte as measured by the gateway (least-latency reads it).
  LatencyEstimate& latency() { return latency_; }
  const LatencyEstimate& latency() const { return latency_; }
  // Prefill and decode rates learned from its responses (the wait scorer's inputs; RequestOutcome adds).
  ServiceRates& rates() { return rates_; }
  const ServiceRates& rates() const { return rates_; }
  // The prediction audit's sums for this pod (kept across pods-file reloads, like the in-flight count).
  PredictionTotals& prediction() { return prediction_; }
  const PredictionTotals& prediction() const { return prediction_; }

 private:
  const PodId id_;
  std::vector<std::unique_ptr<const PodSpec>> spec_versions_;  // every version, the current last (updateSpec)
  std::atomic<const PodSpec*> spec_;                            // the current version
  std::atomic<int32_t> in_flight_{0};
  std::atomic<int64_t> in_flight_tokens_{0};
  std::atomic<int32_t> prefill_requests_{0};
  std::atomic<int64_t> prefill_tokens_{0};
  std::atomic<int32_t> remote_in_flight_{0};
  std::atomic<uint32_t> routed_{0};          // requests ever routed here by this gateway (wraps)
  std::atomic<uint32_t> routed_at_read_{0};  // routed_ when the other replicas' counts were last read
  std::atomic<int32_t> other_replicas_{0};
  std::atomic<bool> healthy_{false};
  std::atomic<bool> checked_{false};
  std::atomic<bool> removed_{false};
  std::atomic<int64_t> ejected_until_ms_{0};
  std::atomic<uint32_t> passes_{0};
  std::atomic<uint32_t> failures_{0};
  mutable std::mutex passive_mutex_;
  PassiveEjection passive_;               // guarded by passive_mutex_
  std::atomic<bool> passive_clean_{true};  // passive_.clean(), readable without the lock
  engine::EngineLoad engine_;
  KvSyncState kv_sync_;
  PredictionTotals prediction_;
  LatencyEstimate latency_;
  ServiceRates rates_;
};

using PodPtr = std::shared_ptr<PodState>;

// Counts a request against a pod (Add on construction, Release with the same tokens when reset or destroyed,
// whatever happened); movable, not copyable.
template <void (PodState::*Add)(int64_t), void (PodState::*Release)(int64_t)>
class PodCountGuard {
 public:
  PodCountGuard() = default;
  explicit PodCountGuard(PodPtr pod, int64_t tokens = 0) : pod_(std::move(pod)), tokens_(tokens) {
    if (pod_) ((*pod_).*Add)(tokens_);
  }
  PodCountGuard(PodCountGuard&& o) noexcept : pod_(std::move(o.pod_)), tokens_(o.tokens_) {}
  PodCountGuard& operator=(PodCountGuard&& o) noexcept {
    if (this != &o) {
      reset();
      pod_ = std::move(o.pod_);
      tokens_ = o.tokens_;
    }
    return *this;
  }
  ~PodCountGuard() { reset(); }
  void reset() {
    if (pod_) ((*pod_).*Release)(tokens_);
    pod_.reset();
  }
  const PodPtr& pod() const { return pod_; }

 private:
  PodPtr pod_;
  int64_t tokens_ = 0;
};

// A request (and its prompt tokens) in flight to a pod, from the moment it is chosen until the guard dies.
using InFlightGuard = PodCountGuard<&PodState::addInFlight, &PodState::releaseInFlight>;
// A request's predicted prefill tokens queued on a pod, from the moment it is chosen until its first response body
// byte (the relay resets it then) or its end.
using PrefillGuard = PodCountGuard<&PodState::addPrefill, &PodState::releasePrefill>;

// An immutable view of the pod set. Never modified after publication.
class PodSet {
 public:
  explicit PodSet(std::vector<PodPtr> pods);
  const std::vector<PodPtr>& pods() const { return pods_; }
  // Pods that serve `model` (ready or not); nullptr when none does.
  const std::vector<PodPtr>* podsFor(std::string_view model) const;
  // Every model served by at least one pod, sorted.
  const std::vector<std::string>& models() const { return models_; }
  PodPtr find(std::string_view name) const;

 private:
  std::vector<PodPtr> pods_;
  // Transparent: a request's model (a string_view into its body) is looked up without a copy.
  struct ModelHash {
    using is_transparent = void;
    size_t operator()(std::string_view model) const { return std::hash<std::string_view>{}(model); }
  };
  std::unordered_map<std::string, std::vector<PodPtr>, ModelHash, std::equal_to<>> by_model_;
  std::vector<std::string> models_;
};

// Owns the current snapshot; discovery sources call update() with the full pod list.
class PodRegistry {
 public:
  PodRegistry();
  // The current snapshot (never null). Each thread keeps the last one it read and reloads it only when an update
  // bumped the version: a request reads one atomic instead of taking the shared_ptr's lock (libstdc++'s
  // atomic<shared_ptr> is a spin lock that every thread's every request would take). A thread holds a replaced
  // snapshot until its next read.
  std::shared_ptr<const PodSet> snapshot() const;

  // Replaces the pod set. A pod is its name and address: one whose entry keeps both keeps its PodId and its live
  // state (health, in-flight counts, prefix records, KV event subscription) whatever else changed (models,
  // kv_events, kv_capacity_tokens, engine, ...), and is reported to the changed listeners with its spec before;
  // a new one, or one at a new address, gets a fresh state and PodId (ids are never reused). Removed pods are
  // marked removed (their streams finish) and reported to the listeners. Thread-safe; updates are serialized.
  void update(std::vector<PodSpec> specs);

  using RemovedListener = std::function<void(PodId)>;
  using AddedListener = std::function<void(const PodPtr&)>;
  using ChangedListener = std::function<void(const PodPtr&, const PodSpec& before)>;
  void onRemoved(RemovedListener listener);
  void onAdded(AddedListener listener);
  void onChanged(ChangedListener listener);

 private:
  std::atomic<std::shared_ptr<const PodSet>> current_;
  std::atomic<uint64_t> version_{0};  // bumped after each store to current_
  const uint64_t instance_;            // tells this registry's snapshots from another's in a thread's cache
  std::mutex update_mutex_;
  uint32_t next_id_ = 1;
  std::vector<RemovedListener> removed_listeners_;
  std::vector<AddedListener> added_listeners_;
  std::vector<ChangedListener> changed_listeners_;
};

}  // namespace prefixgate::discovery
