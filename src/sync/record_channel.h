#pragma once
// The records channel of state sync (state_sync.h): the prefix records other replicas routed, from the stream's
// batches and from the snapshot, applied to this replica's index. No I/O here: StateSync reads Redis and hands over
// what it read; this replica's own records go out through the Outbox.
#include <cstdint>
#include <string_view>

#include "routing/prefix/prefix_services.h"
#include "sync/pod_lookup.h"
#include "sync/record_batch.h"
#include "sync/state_sync_metrics.h"
#include "util/log.h"

namespace prefixgate::sync {

// Sync thread only. Everything given must outlive it.
class RecordChannel {
 public:
  // `malformed_warnings`: shared with the session channel, so that what another replica can repeat at will is
  // written at most once a second in all.
  RecordChannel(routing::PrefixServices& prefix, PodLookup& pods, StateSyncMetrics& metrics,
                log::Throttle& malformed_warnings)
      : prefix_(prefix), pods_(pods), metrics_(metrics), malformed_warnings_(malformed_warnings) {}

  // Applies each record of one stream entry's batch (field d) in order; a malformed batch is counted and warned
  // about, the records before the fault stay applied. `now_wall_ms`: when it was read, for the lag.
  void applyBatch(std::string_view batch, int64_t now_wall_ms);
  // Applies one record, unless this replica does not route its model to its pod (counted as unknown_pod).
  // `from_snapshot`: the record is no fresh routing decision, so it says nothing of the lag.
  void apply(const Record& record, int64_t now_wall_ms, bool from_snapshot);
  // Applies each withdrawal of one stream entry's batch (field w): the blocks another replica's request never got
  // computed on a pod leave this replica's index for that pod too (PrefixServices::withdrawRouted).
  void applyWithdrawals(std::string_view batch);

 private:
  // The pod of `r`, when this replica routes `r`'s model to it; else counts it as unknown_pod and returns null.
  discovery::PodState* servingPod(const Record& r);
  // Counts and warns about (at most once a second) a malformed batch.
  void warnMalformed(std::string_view what, const std::string& error);

  routing::PrefixServices& prefix_;
  PodLookup& pods_;
  StateSyncMetrics& metrics_;
  log::Throttle& malformed_warnings_;
};

}  // namespace prefixgate::sync
