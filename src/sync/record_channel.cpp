#include "sync/record_channel.h"

#include <algorithm>

namespace prefixgate::sync {

void RecordChannel::applyBatch(std::string_view batch, int64_t now_wall_ms) {
  BatchReader reader(batch);
  Record r;
  while (reader.next(r)) apply(r, now_wall_ms, false);
  if (!reader.error().empty()) warnMalformed("record", reader.error());
}

void RecordChannel::applyWithdrawals(std::string_view batch) {
  WithdrawalBatchReader reader(batch);
  Withdrawal w;
  while (reader.next(w)) {
    discovery::PodState* pod = servingPod(w.record);
    if (!pod) continue;
    prefix_.withdrawRouted(w.record.model, w.record.hashes, w.keep, *pod, false);
    metrics_.withdrawals_received.Increment();
  }
  if (!reader.error().empty()) warnMalformed("withdrawal", reader.error());
}

void RecordChannel::warnMalformed(std::string_view what, const std::string& error) {
  metrics_.malformed.Increment();
  if (uint64_t more = 0; malformed_warnings_.allow(more))
    log::warn("state sync: a {} batch from another replica is malformed: {} ({} more since the last such line)", what,
              error, more);
}

discovery::PodState* RecordChannel::servingPod(const Record& r) {
  discovery::PodState* pod = pods_.find(r.pod);
  if (!pod || std::find(pod->spec().models.begin(), pod->spec().models.end(), r.model) == pod->spec().models.end()) {
    metrics_.unknown_pod.Increment();
    return nullptr;
  }
  return pod;
}

void RecordChannel::apply(const Record& r, int64_t now_wall_ms, bool from_snapshot) {
  discovery::PodState* pod = servingPod(r);
  if (!pod) return;
  if (!from_snapshot)
    metrics_.lag_seconds.Observe(static_cast<double>(std::max<int64_t>(0, now_wall_ms - r.wall_ms)) / 1000.0);
  prefix_.recordRouted(r.model, r.hashes, *pod, false);
  metrics_.received.Increment();
}

}  // namespace prefixgate::sync
