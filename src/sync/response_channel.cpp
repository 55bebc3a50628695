#include "sync/response_channel.h"

#include <algorithm>

namespace prefixgate::sync {

void ResponseChannel::applyBatch(std::string_view batch, int64_t now_wall_ms) {
  ResponseBatchReader reader(batch);
  ResponseEntry entry;
  while (reader.next(entry)) apply(entry, now_wall_ms);
  if (!reader.error().empty()) malformed("a response batch", reader.error());
}

void ResponseChannel::malformed(std::string_view what, std::string_view error) {
  metrics_.responses_malformed.Increment();
  if (uint64_t more = 0; malformed_warnings_.allow(more))
    log::warn("state sync: {} from another replica is malformed: {} ({} more since the last such line)", what, error,
              more);
}

void ResponseChannel::apply(const ResponseEntry& entry, int64_t now_wall_ms) {
  if (!entry.remembered) {
    // Whatever pod it named: the response is gone, and an id names one response.
    affinity_.forgetRemote(entry.id);
    metrics_.responses_received.Increment();
    return;
  }
  const discovery::PodState* pod = pods_.find(entry.pod);
  if (!pod) {
    metrics_.responses_unknown_pod.Increment();
    return;
  }
  // A wall-clock time from the other replica, as an age (a time ahead of ours counts as now).
  if (affinity_.applyRemote(entry.id, pod->name(), std::max<int64_t>(0, now_wall_ms - entry.wall_ms)))
    metrics_.responses_received.Increment();
}

}  // namespace prefixgate::sync
