#include "sync/session_channel.h"

#include <algorithm>

#include "routing/router.h"

namespace prefixgate::sync {

void SessionChannel::applyBatch(std::string_view batch, int64_t now_wall_ms) {
  SessionBatchReader reader(batch);
  SessionPin pin;
  while (reader.next(pin)) apply(pin, now_wall_ms);
  if (!reader.error().empty()) {
    metrics_.sessions_malformed.Increment();
    if (uint64_t more = 0; malformed_warnings_.allow(more))
      log::warn("state sync: a session batch from another replica is malformed: {} ({} more since the last such line)",
                reader.error(), more);
  }
}

void SessionChannel::apply(const SessionPin& pin, int64_t now_wall_ms) {
  const discovery::PodState* pod = pods_.find(pin.pod);
  if (!pod) {
    metrics_.sessions_unknown_pod.Increment();
    return;
  }
  // Wall-clock times from the other replica, as ages, onto the table's steady clock.
  const int64_t now = routing::steadyNowMs();
  const auto local = [&](int64_t wall_ms) { return now - std::max<int64_t>(0, now_wall_ms - wall_ms); };
  table_.applyRemote(pin.id, {pod->id(), local(pin.wall_ms), local(pin.pinned_ms)}, now);
  metrics_.sessions_received.Increment();
}

}  // namespace prefixgate::sync
