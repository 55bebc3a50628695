#pragma once
// The prefixgate_state_sync_* series (docs/state-sync.md), shared by state sync's channels: each counts what it
// sends, applies and drops.
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace prefixgate::sync {

// Registered once per StateSync; the counters are thread-safe (request threads count what the outbox refuses).
struct StateSyncMetrics {
  explicit StateSyncMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& records;
  prometheus::Family<prometheus::Counter>& dropped;
  prometheus::Family<prometheus::Counter>& withdrawals;
  prometheus::Family<prometheus::Counter>& sessions;
  prometheus::Family<prometheus::Counter>& sessions_dropped;
  prometheus::Family<prometheus::Counter>& bytes;
  prometheus::Family<prometheus::Histogram>& lag;
  prometheus::Family<prometheus::Counter>& snapshot_loads;
  prometheus::Family<prometheus::Counter>& errors;
  prometheus::Family<prometheus::Counter>& reconnects;
  prometheus::Family<prometheus::Gauge>& connected;
  prometheus::Family<prometheus::Gauge>& replicas;
  prometheus::Family<prometheus::Counter>& flow_service;
  prometheus::Family<prometheus::Counter>& flow_service_dropped;
  prometheus::Family<prometheus::Counter>& responses;
  prometheus::Family<prometheus::Counter>& responses_dropped;
  prometheus::Counter& sent;
  prometheus::Counter& received;
  prometheus::Counter& over_rate;
  prometheus::Counter& pending_full;
  prometheus::Counter& unknown_pod;
  prometheus::Counter& malformed;
  prometheus::Counter& withdrawals_sent;
  prometheus::Counter& withdrawals_received;
  prometheus::Counter& sessions_sent;
  prometheus::Counter& sessions_received;
  prometheus::Counter& sessions_over_rate;
  prometheus::Counter& sessions_pending_full;
  prometheus::Counter& sessions_unknown_pod;
  prometheus::Counter& sessions_malformed;
  prometheus::Counter& bytes_sent;
  prometheus::Counter& bytes_received;
  prometheus::Histogram& lag_seconds;
  prometheus::Counter& snapshot_loads_total;
  prometheus::Counter& errors_total;
  prometheus::Counter& reconnects_total;
  prometheus::Gauge& connected_gauge;
  prometheus::Gauge& replicas_gauge;
  prometheus::Counter& flow_service_charges;
  prometheus::Counter& flow_service_too_large;
  prometheus::Counter& flow_service_malformed;
  prometheus::Counter& responses_sent;
  prometheus::Counter& responses_received;
  prometheus::Counter& responses_over_rate;
  prometheus::Counter& responses_pending_full;
  prometheus::Counter& responses_unknown_pod;
  prometheus::Counter& responses_malformed;
};

}  // namespace prefixgate::sync
