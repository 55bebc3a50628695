#pragma once
// The pods the gateway can route to: an immutable snapshot swapped atomically by discovery, and per-pod live
// state that outlives snapshots so it survives a pods-file reload. Discovery owns a pod's identity, address and
// readiness (health, ejection); routing's per-pod signals (routing/pod_signals.h) live here for the pod's life.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "discovery/kv_sync_state.h"
#include "discovery/pod_role.h"
#include "discovery/passive_ejection.h"
#include "engine/engine_load.h"
#include "prefixgate/types.h"
#include "routing/pod_signals.h"

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
  PodRole role = PodRole::kBoth;  // disaggregated prefill/decode: which legs it serves
  bool operator==(const PodSpec&) const = default;
  // A pod is its name and its address: an entry that keeps both is the same pod, whatever else changed.
  bool sameIdentity(const PodSpec& o) const { return name == o.name && address == o.address; }
};

// The fields (by their config key) in which two specs of one pod differ, e.g. "models, kv_capacity_tokens".
std::string changedFields(const PodSpec& before, const PodSpec& after);


// One line per model that has prefill pods but no pod to decode on (role decode or both): its requests could
// never be decoded. "model 'm': prefill pods p-0, p-1 but no pod with role decode or both (...)"; empty = none.
std::vector<std::string> undecodableModels(const std::vector<PodSpec>& pods);

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
  // Routing's signals about the pod (in-flight counts, latency, service rates, prediction audit): allocated with
  // the pod, so they survive a reload that keeps it; routing (routing/pod_signals.h) does every read and write.
  routing::PodSignals& signals() { return signals_; }
  const routing::PodSignals& signals() const { return signals_; }

 private:
  const PodId id_;
  std::vector<std::unique_ptr<const PodSpec>> spec_versions_;  // every version, the current last (updateSpec)
  std::atomic<const PodSpec*> spec_;                            // the current version
  // Routing's signals next to the spec and health: a decision reads all three for every candidate (cache lines).
  routing::PodSignals signals_;
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
};

using PodPtr = std::shared_ptr<PodState>;

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
  // The model has prefill pods and decode pods (their specs' roles, ready or not): each of its requests is
  // prefilled on one and decoded on another (docs/configuration.md, "Disaggregated prefill/decode").
  bool disaggregated(std::string_view model) const;

 private:
  std::vector<PodPtr> pods_;
  // Transparent: a request's model (a string_view into its body) is looked up without a copy.
  struct ModelHash {
    using is_transparent = void;
    size_t operator()(std::string_view model) const { return std::hash<std::string_view>{}(model); }
  };
  std::unordered_map<std::string, std::vector<PodPtr>, ModelHash, std::equal_to<>> by_model_;
  std::vector<std::string> models_;
  std::unordered_set<std::string, ModelHash, std::equal_to<>> disaggregated_;
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
