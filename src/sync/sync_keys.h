#pragma once
// The Redis keys of state sync (docs/state-sync.md), every one state_sync.key_prefix and ':' first, so that
// gateways sharing a Redis server for other purposes do not collide.
#include <string>
#include <string_view>

namespace prefixgate::sync {

struct SyncKeys {
  explicit SyncKeys(std::string_view key_prefix)
      : prefix(std::string(key_prefix) + ":"),
        records(prefix + "records"),
        snapshot(prefix + "snapshot"),
        sessions(prefix + "sessions"),
        responses(prefix + "responses"),
        replicas(prefix + "replicas") {}

  // A replica's in-flight counts (a string that expires with its heartbeat).
  std::string load(std::string_view replica_id) const { return prefix + "load:" + std::string(replica_id); }
  // A replica's flow service totals (flow control on; a string that expires with its heartbeat).
  std::string flow(std::string_view replica_id) const { return prefix + "flow:" + std::string(replica_id); }

  const std::string prefix;
  const std::string records;   // the stream: one entry per flush, its records (field d), pins (field s),
                               // withdrawals (field w) and response ids (field a)
  const std::string snapshot;  // sorted set: a record without its time, scored by its newest time
  const std::string sessions;  // sorted set: a pin without its use time, scored by its use time
  const std::string responses;  // sorted set: a response id and its pod's address, scored by when it was produced
  const std::string replicas;  // set: the replicas that published a heartbeat
};

}  // namespace prefixgate::sync
