#pragma once
// The snapshots of state sync (state_sync.h): two sorted sets that serve a replica which starts late or missed a
// trimmed part of the stream (three with the Responses API's ids). <prefix>:snapshot holds records (member: a record without its time, score: its newest
// time), trimmed to the index expiry and snapshot_max_records; <prefix>:sessions holds pins (member: a pin without
// its use time, score: its use time), trimmed to the session TTL and max_sessions. Each replica adds what it sent
// since its last update, every snapshot_interval_ms. The commands are built and the replies decoded here;
// StateSync runs them on Redis.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>

#include "config/config.h"
#include "sync/outbox.h"
#include "sync/record_channel.h"
#include "sync/resp.h"
#include "sync/response_channel.h"
#include "sync/session_channel.h"
#include "sync/state_sync_metrics.h"
#include "sync/sync_keys.h"

namespace prefixgate::sync {

// Sync thread only. Everything given must outlive it.
class SnapshotChannel {
 public:
  struct Loaded {
    size_t records = 0;
    size_t pins = 0;
    size_t responses = 0;
  };
  // `records`, `sessions`: the channels whose snapshot is shared, which a loaded one is applied to; null for a kind
  // that is not shared (`responses` too). `record_expiry`: the index's (the records snapshot keeps none older).
  SnapshotChannel(const config::StateSyncConfig& config, std::chrono::milliseconds record_expiry, const SyncKeys& keys,
                  RecordChannel* records, SessionChannel* sessions, StateSyncMetrics& metrics,
                  ResponseChannel* responses = nullptr);

  // Learns the records, pins and withdrawals of a batch just sent (the newest time per member), for the next update; what is
  // learned beyond the snapshots' bounds is left out.
  void learn(const Outbox::Taken& batch);
  bool hasPending() const {
    return !records_pending_.empty() || !sessions_pending_.empty() || !withdrawn_pending_.empty() ||
           !responses_pending_.empty() || !forgotten_pending_.empty();
  }
  // ZADD of what was learned, then each snapshot's trims, then a ZREM of the records withdrawn (and of the response
  // ids forgotten), as of `wall_ms`.
  // Returns the number of commands.
  size_t appendUpdate(std::string& commands, int64_t wall_ms) const;
  // Forgets what was learned (the update was sent).
  void clearPending();

  // ZREVRANGEBYSCORE of each shared snapshot: its newest members only, as many as it keeps (another writer may
  // have added any number). Returns the number of commands.
  size_t appendRead(std::string& commands, int64_t wall_ms) const;
  // Applies the replies of appendRead's commands, oldest member first (the replies are newest first), so the
  // index's and the session table's LRU orders follow the ages; a member it cannot read is counted as malformed.
  Loaded apply(std::span<const RedisReply> replies, int64_t wall_ms);
  // Where to read the stream from after loading the snapshots at `wall_ms`: they are up to one snapshot interval
  // (plus a flush) behind the stream, so a little before that, with a second of margin for clocks. What is applied
  // twice changes nothing.
  std::string streamPositionAfter(int64_t wall_ms) const;

 private:
  using Pending = std::map<std::string, int64_t, std::less<>>;  // member -> newest wall ms
  static size_t appendAdd(std::string& commands, const std::string& key, const Pending& pending, int64_t wall_ms,
                          int64_t max_age_ms, uint64_t max_members);

  const config::StateSyncConfig& config_;
  const std::chrono::milliseconds expiry_;
  const SyncKeys& keys_;
  RecordChannel* records_;
  SessionChannel* sessions_;
  StateSyncMetrics& metrics_;
  ResponseChannel* responses_;
  Pending records_pending_;
  Pending sessions_pending_;
  std::set<std::string, std::less<>> withdrawn_pending_;  // records members to remove
  Pending responses_pending_;
  std::set<std::string, std::less<>> forgotten_pending_;  // responses members to remove
};

}  // namespace prefixgate::sync
