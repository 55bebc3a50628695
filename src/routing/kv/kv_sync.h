#pragma once
// KV event sync mode, assembled: the subscriber (engine/kv_event_subscriber.h) feeding the KV event index
// (kv_event_index.h) from every pod's publisher, each pod's KvSyncState kept current, and the prefixgate_kv_events_*
// Prometheus series. Built by the gateway when routing.prefix_cache.kv_event_sync is on.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "discovery/pod_set.h"
#include "engine/kv_event_subscriber.h"
#include "routing/kv/kv_event_index.h"

namespace prefixgate::routing {

// prefixgate_kv_events_* by pod: messages, blocks stored and removed, decode errors, gaps, replays, resets, lag, and
// what was refused to keep one publisher within its bounds (refused_total{reason}).
class KvEventMetrics final : public engine::KvEventObserver {
 public:
  explicit KvEventMetrics(prometheus::Registry& registry);
  void messageApplied(const discovery::PodState& pod, const engine::KvEventBatch& batch, double lag_seconds) override;
  void decodeFailed(const discovery::PodState& pod, std::string_view reason) override;
  void streamCounters(const discovery::PodState& pod, const engine::KvStreamCounters& delta) override;
  void applied(const discovery::PodState& pod, const KvApplied& applied);
  // A batch lost events it could not read: the pod's blocks were forgotten.
  void lossyBatch(const discovery::PodState& pod) { seriesFor(pod).resets->Increment(); }

 private:
  struct PodSeries {
    prometheus::Counter* messages;
    prometheus::Counter* stored;
    prometheus::Counter* removed;
    prometheus::Counter* cleared;
    prometheus::Counter* orphans;
    prometheus::Counter* skipped;
    prometheus::Counter* gaps;
    prometheus::Counter* restarts;
    prometheus::Counter* replays;
    prometheus::Counter* replay_failures;
    prometheus::Counter* resets;
    std::array<prometheus::Counter*, kKvRefusalCount> refused;
    prometheus::Counter* replay_hold_refused;  // held live messages dropped (reason "replay_hold")
    prometheus::Gauge* lag;
    prometheus::Histogram* lag_histogram;
  };
  PodSeries& seriesFor(const discovery::PodState& pod);  // the subscriber's thread only

  prometheus::Family<prometheus::Counter>& messages_;
  prometheus::Family<prometheus::Counter>& blocks_stored_;
  prometheus::Family<prometheus::Counter>& blocks_removed_;
  prometheus::Family<prometheus::Counter>& clears_;
  prometheus::Family<prometheus::Counter>& orphans_;
  prometheus::Family<prometheus::Counter>& skipped_;
  prometheus::Family<prometheus::Counter>& decode_errors_;
  prometheus::Family<prometheus::Counter>& gaps_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Counter>& replays_;
  prometheus::Family<prometheus::Counter>& replay_failures_;
  prometheus::Family<prometheus::Counter>& resets_;
  prometheus::Family<prometheus::Counter>& refused_;
  prometheus::Family<prometheus::Gauge>& lag_;
  prometheus::Family<prometheus::Histogram>& lag_histogram_;
  std::unordered_map<std::string, PodSeries> series_;
};

class KvSync {
 public:
  // `index` and `pods` must outlive this. The subscriber's per-publisher bounds (held bytes, round budget) come from
  // the index's options (options.bounds, set from the config), whatever `options` says of them.
  KvSync(discovery::PodRegistry& pods, KvEventIndex& index, prometheus::Registry& registry,
         engine::KvEventSubscriber::Options options);
  ~KvSync();
  void start() { subscriber_.start(); }
  void stop() { subscriber_.stop(); }

 private:
  KvEventIndex& index_;
  KvEventMetrics metrics_;
  engine::KvEventSubscriber subscriber_;
};

}  // namespace prefixgate::routing
