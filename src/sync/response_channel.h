#pragma once
// The responses channel of state sync (state_sync.h): the response ids other replicas remembered (the pod that
// produced each, for the Responses API's chain affinity) and forgot (deleted), from the stream's batches and from the
// responses snapshot, applied to this replica's ResponseAffinity. No I/O here: StateSync reads Redis and hands over
// what it read; this replica's own ids go out through the Outbox.
#include <cstdint>
#include <string_view>

#include "routing/response_affinity.h"
#include "sync/pod_lookup.h"
#include "sync/record_batch.h"
#include "sync/state_sync_metrics.h"
#include "util/log.h"

namespace prefixgate::sync {

// Sync thread only. Everything given must outlive it.
class ResponseChannel {
 public:
  // `malformed_warnings`: shared with the other channels (at most one line a second in all).
  ResponseChannel(routing::ResponseAffinity& affinity, PodLookup& pods, StateSyncMetrics& metrics,
                  log::Throttle& malformed_warnings)
      : affinity_(affinity), pods_(pods), metrics_(metrics), malformed_warnings_(malformed_warnings) {}

  // Applies each entry of one stream entry's response batch (field a) in order; a malformed batch is counted and
  // warned about, the entries before the fault stay applied. `now_wall_ms`: when it was read.
  void applyBatch(std::string_view batch, int64_t now_wall_ms);
  // Applies one entry: a forget drops the id; a remember of a pod this replica does not route to is counted as
  // unknown_pod, else its wall-clock time becomes an age on the map's clock (one older than the TTL is ignored).
  void apply(const ResponseEntry& entry, int64_t now_wall_ms);
  // Counts and warns about something another replica wrote that cannot be read.
  void malformed(std::string_view what, std::string_view error);
  // The map's bounds, which the responses snapshot keeps too.
  size_t maxEntries() const { return affinity_.maxEntries(); }
  int64_t ttlMs() const { return affinity_.ttlMs(); }

 private:
  routing::ResponseAffinity& affinity_;
  PodLookup& pods_;
  StateSyncMetrics& metrics_;
  log::Throttle& malformed_warnings_;
};

}  // namespace prefixgate::sync
