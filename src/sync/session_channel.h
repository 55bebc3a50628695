#pragma once
// The sessions channel of state sync (state_sync.h): the session pins other replicas made or refreshed
// (session-affinity), from the stream's batches and from the session snapshot, applied to this replica's session
// table. No I/O here: StateSync reads Redis and hands over what it read; this replica's own pins go out through the
// Outbox.
#include <cstdint>
#include <string_view>

#include "routing/session_table.h"
#include "sync/pod_lookup.h"
#include "sync/record_batch.h"
#include "sync/state_sync_metrics.h"
#include "util/log.h"

namespace prefixgate::sync {

// Sync thread only. Everything given must outlive it.
class SessionChannel {
 public:
  // `malformed_warnings`: shared with the records channel (at most one line a second in all).
  SessionChannel(routing::SessionTable& table, PodLookup& pods, StateSyncMetrics& metrics,
                 log::Throttle& malformed_warnings)
      : table_(table), pods_(pods), metrics_(metrics), malformed_warnings_(malformed_warnings) {}

  // Applies each pin of one stream entry's session batch (field s) in order; a malformed batch is counted and
  // warned about, the pins before the fault stay applied. `now_wall_ms`: when it was read.
  void applyBatch(std::string_view batch, int64_t now_wall_ms);
  // Applies one pin, its wall-clock times taken as ages onto the table's steady clock; a pin to a pod this replica
  // does not route to is counted as unknown_pod.
  void apply(const SessionPin& pin, int64_t now_wall_ms);
  // The table's bounds (its TTL and size), which the session snapshot keeps too.
  const routing::SessionTable::Settings& settings() const { return table_.settings(); }

 private:
  routing::SessionTable& table_;
  PodLookup& pods_;
  StateSyncMetrics& metrics_;
  log::Throttle& malformed_warnings_;
};

}  // namespace prefixgate::sync
