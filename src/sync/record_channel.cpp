#include "sync/record_channel.h"

#include <algorithm>

namespace prefixgate::sync {

void RecordChannel::applyBatch(std::string_view batch, int64_t now_wall_ms) {
  BatchReader reader(batch);
  Record r;
  while (reader.next(r)) apply(r, now_wall_ms, false);
  if (!reader.error().empty()) {
    metrics_.malformed.Increment();
    if (uint64_t more = 0; malformed_warnings_.allow(more))
      log::warn("state sync: a record batch from another replica is malformed: {} ({} more since the last such line)",
                reader.error(), more);
  }
}

void RecordChannel::apply(const Record& r, int64_t now_wall_ms, bool from_snapshot) {
  discovery::PodState* pod = pods_.find(r.pod);
  const auto serves = [&r](const discovery::PodState& p) {
    return std::find(p.spec().models.begin(), p.spec().models.end(), r.model) != p.spec().models.end();
  };
  if (!pod || !serves(*pod)) {
    metrics_.unknown_pod.Increment();
    return;
  }
  if (!from_snapshot)
    metrics_.lag_seconds.Observe(static_cast<double>(std::max<int64_t>(0, now_wall_ms - r.wall_ms)) / 1000.0);
  prefix_.recordRouted(r.model, r.hashes, *pod, false);
  metrics_.received.Increment();
}

}  // namespace prefixgate::sync
