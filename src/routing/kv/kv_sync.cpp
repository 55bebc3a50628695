#include "routing/kv/kv_sync.h"

#include <algorithm>
#include <chrono>

#include "util/log.h"

namespace prefixgate::routing {
namespace {

int64_t steadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

prometheus::Family<prometheus::Counter>& counter(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}

}  // namespace

KvEventMetrics::KvEventMetrics(prometheus::Registry& r)
    : messages_(counter(r, "prefixgate_kv_events_messages_total", "KV event messages applied, by pod")),
      blocks_stored_(counter(r, "prefixgate_kv_events_blocks_stored_total", "Blocks indexed from BlockStored, by pod")),
      blocks_removed_(counter(r, "prefixgate_kv_events_blocks_removed_total", "Blocks dropped by BlockRemoved, by pod")),
      clears_(counter(r, "prefixgate_kv_events_cleared_total", "AllBlocksCleared events, by pod")),
      orphans_(counter(r, "prefixgate_kv_events_orphan_blocks_total",
                       "Stored blocks whose parent the pod never announced (not indexed), by pod")),
      skipped_(counter(r, "prefixgate_kv_events_skipped_total",
                       "Events or blocks left out: unknown tags, malformed events, other KV cache groups or media")),
      decode_errors_(counter(r, "prefixgate_kv_events_decode_errors_total",
                             "Messages that could not be decoded, by pod and reason")),
      gaps_(counter(r, "prefixgate_kv_events_gaps_total", "Sequence gaps (lost messages), by pod")),
      restarts_(counter(r, "prefixgate_kv_events_publisher_restarts_total", "Sequences going back, by pod")),
      replays_(counter(r, "prefixgate_kv_events_replays_total", "Replay requests sent, by pod")),
      replay_failures_(counter(r, "prefixgate_kv_events_replay_failures_total",
                               "Replays that could not fill a gap (too far back, timed out), by pod")),
      resets_(counter(r, "prefixgate_kv_events_resets_total", "Times a pod's blocks were forgotten, by pod")),
      refused_(counter(r, "prefixgate_kv_events_refused_total",
                       "What a pod's publisher sent past its bounds, by pod and reason: rank (batches), adapters and "
                       "adapter_name (BlockStored events), pod_capacity and index_share (blocks dropped, its "
                       "oldest), replay_hold (live messages dropped while a replay ran)")),
      lag_(prometheus::BuildGauge()
               .Name("prefixgate_kv_events_lag_seconds")
               .Help("Age of the last applied message (engine timestamp to gateway), by pod")
               .Register(r)),
      lag_histogram_(prometheus::BuildHistogram()
                         .Name("prefixgate_kv_events_lag_distribution_seconds")
                         .Help("Age of applied messages (engine timestamp to gateway), by pod")
                         .Register(r)) {}

KvEventMetrics::PodSeries& KvEventMetrics::seriesFor(const discovery::PodState& pod) {
  auto it = series_.find(pod.name());
  if (it != series_.end()) return it->second;
  const prometheus::Labels labels{{"pod", pod.name()}};
  PodSeries s{&messages_.Add(labels),      &blocks_stored_.Add(labels), &blocks_removed_.Add(labels),
              &clears_.Add(labels),        &orphans_.Add(labels),       &skipped_.Add(labels),
              &gaps_.Add(labels),          &restarts_.Add(labels),      &replays_.Add(labels),
              &replay_failures_.Add(labels), &resets_.Add(labels),      {},
              &refused_.Add({{"pod", pod.name()}, {"reason", "replay_hold"}}),
              &lag_.Add(labels),
              &lag_histogram_.Add(labels, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.05, 0.1,
                                                                                  0.5, 1, 5})};
  for (size_t i = 0; i < kKvRefusalCount; ++i)
    s.refused[i] = &refused_.Add({{"pod", pod.name()}, {"reason", std::string(kvRefusalName(static_cast<KvRefusal>(i)))}});
  return series_.emplace(pod.name(), s).first->second;
}

void KvEventMetrics::messageApplied(const discovery::PodState& pod, const engine::KvEventBatch& batch,
                                    double lag_seconds) {
  PodSeries& s = seriesFor(pod);
  s.messages->Increment();
  if (batch.skipped_events > 0) s.skipped->Increment(batch.skipped_events);
  s.lag->Set(lag_seconds);
  s.lag_histogram->Observe(lag_seconds);
}

void KvEventMetrics::decodeFailed(const discovery::PodState& pod, std::string_view reason) {
  decode_errors_.Add({{"pod", pod.name()}, {"reason", std::string(reason)}}).Increment();
}

void KvEventMetrics::streamCounters(const discovery::PodState& pod, const engine::KvStreamCounters& delta) {
  PodSeries& s = seriesFor(pod);
  s.gaps->Increment(static_cast<double>(delta.gaps));
  s.restarts->Increment(static_cast<double>(delta.restarts));
  s.replays->Increment(static_cast<double>(delta.replays));
  s.replay_failures->Increment(static_cast<double>(delta.replay_failures));
  s.resets->Increment(static_cast<double>(delta.resets));
  s.replay_hold_refused->Increment(static_cast<double>(delta.held_dropped));
  if (delta.gaps || delta.restarts || delta.replay_failures)
    log::warn("kv events: pod {}: {} gaps, {} publisher restarts, {} failed replays", pod.name(), delta.gaps,
              delta.restarts, delta.replay_failures);
}

void KvEventMetrics::applied(const discovery::PodState& pod, const KvApplied& applied) {
  PodSeries& s = seriesFor(pod);
  s.stored->Increment(static_cast<double>(applied.blocks_stored));
  s.removed->Increment(static_cast<double>(applied.blocks_removed));
  s.cleared->Increment(static_cast<double>(applied.clears));
  s.orphans->Increment(static_cast<double>(applied.orphan_blocks));
  s.skipped->Increment(static_cast<double>(applied.ignored_blocks));
  s.resets->Increment(static_cast<double>(applied.resets));
  for (size_t i = 0; i < kKvRefusalCount; ++i) s.refused[i]->Increment(static_cast<double>(applied.refused[i]));
}

namespace {
// The subscriber's per-publisher bounds, from the config (through the index's options: the gateway builds KvSync
// from the index alone).
engine::KvEventSubscriber::Options withBounds(engine::KvEventSubscriber::Options options, const KvEventBounds& bounds) {
  options.max_held_bytes = bounds.replay_hold_bytes;
  options.round_bytes = bounds.poll_round_bytes;
  return options;
}

// What the pod's spec and engine say bounds its events: its declared ranks, its KV capacity.
KvPodLimits limitsOf(const discovery::PodState& pod) {
  const uint64_t tokens = pod.spec().kv_capacity_tokens ? pod.spec().kv_capacity_tokens : pod.engine().kvCapacityTokens();
  return KvPodLimits{std::max<uint32_t>(1, pod.spec().data_parallel_size), tokens};
}
}  // namespace

KvSync::KvSync(discovery::PodRegistry& pods, KvEventIndex& index, prometheus::Registry& registry,
               engine::KvEventSubscriber::Options options)
    : index_(index),
      metrics_(registry),
      subscriber_(
          pods,
          engine::KvEventSubscriber::Sink{
              [this](discovery::PodState& pod, const engine::KvEventBatch& batch) {
                const std::string& model = pod.spec().models.empty() ? pod.name() : pod.spec().models.front();
                // An event that could not be read may have been a BlockRemoved: what the pod holds is no longer
                // known, so its blocks are forgotten (under-predicting is safe, over-predicting is not).
                if (batch.skipped(engine::KvSkipReason::kBadEvent) + batch.skipped(engine::KvSkipReason::kTooManyTokens) +
                        batch.skipped(engine::KvSkipReason::kTooManyEvents) >
                    0) {
                  index_.resetPod(pod.id());
                  metrics_.lossyBatch(pod);
                }
                metrics_.applied(pod, index_.apply(pod.id(), model, batch, limitsOf(pod)));
                pod.kvSync().noteEvent(steadyMs());
              },
              [this](discovery::PodState& pod) { index_.resetPod(pod.id()); },
              [this](PodId id) { index_.removePod(id); },
              [](discovery::PodState& pod) { pod.kvSync().noteSubscribed(steadyMs()); }},
          &metrics_, withBounds(options, index.options().bounds)) {}

KvSync::~KvSync() { stop(); }

}  // namespace prefixgate::routing
