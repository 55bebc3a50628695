#pragma once
// What a replica has yet to send to the others through Redis (state_sync.*, docs/state-sync.md).
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "prefixgate/types.h"
#include "sync/record_batch.h"

namespace prefixgate::sync {

// Records, session pins, withdrawals and response ids waiting to be sent: appended by request threads, taken by the sync thread. Bounded
// twice, all kinds together: in bytes waiting (state_sync.max_pending_bytes: Redis away for long) and in bytes per
// second (max_send_bytes_per_second: a token bucket with one second of burst). Thread-safe.
class Outbox {
 public:
  enum class Added { kQueued, kOverRate, kFull };
  struct Taken {
    std::string records;  // appendRecord's encoding, back to back
    size_t count = 0;
    std::string sessions;  // appendSession's encoding, back to back
    size_t session_count = 0;
    std::string withdrawals;  // appendWithdrawal's encoding, back to back
    size_t withdrawal_count = 0;
    std::string responses;  // appendResponse's encoding, back to back
    size_t response_count = 0;
    bool empty() const { return count == 0 && session_count == 0 && withdrawal_count == 0 && response_count == 0; }
    size_t bytes() const { return records.size() + sessions.size() + withdrawals.size() + responses.size(); }
  };
  struct Dropped {
    size_t records = 0;
    size_t sessions = 0;
    size_t withdrawals = 0;
    size_t responses = 0;
  };
  Outbox(uint64_t max_pending_bytes, uint64_t bytes_per_second, uint32_t max_blocks_per_record);
  // Queues a record of the first max_blocks_per_record blocks of `hashes`. `steady_ms` drives the rate limit.
  Added add(int64_t wall_ms, int64_t steady_ms, std::string_view model, std::string_view pod,
            std::span<const BlockHash> hashes);
  // Queues a session pin.
  Added addSession(int64_t steady_ms, const SessionPin& pin);
  // Queues a withdrawal of a record `add` queued (the same first max_blocks_per_record blocks of `hashes`): the pod
  // holds no more than `keep` of them.
  Added addWithdrawal(int64_t wall_ms, int64_t steady_ms, std::string_view model, std::string_view pod,
                      std::span<const BlockHash> hashes, uint64_t keep);
  // Queues a response id remembered or forgotten (Responses API chain affinity).
  Added addResponse(int64_t steady_ms, const ResponseEntry& entry);
  Taken take();
  // Puts back a batch that could not be sent (ahead of what was queued since), as far as the byte bound allows;
  // returns how many of each kind did not fit and were dropped.
  Dropped putBack(Taken taken);
  size_t pendingBytes() const;

 private:
  // Keeps what was just appended to `queue` (from `before` on) if the rate and the byte bound allow it.
  Added admit(std::string& queue, size_t before, size_t& count, int64_t steady_ms);
  const uint64_t max_pending_bytes_;
  const uint64_t bytes_per_second_;
  const uint32_t max_blocks_;
  mutable std::mutex mutex_;
  Taken pending_;
  double tokens_;  // the rate limit's bucket, in bytes
  int64_t refilled_ms_ = 0;
};

}  // namespace prefixgate::sync
