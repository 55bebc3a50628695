#pragma once
// The load channel of state sync (state_sync.h): each replica publishes its in-flight counts per pod with a
// heartbeat and reads the others', and a pod's remote count is the sum over the live ones. The commands are built
// and the replies decoded here; StateSync runs them on Redis.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "sync/load_entries.h"
#include "sync/pod_lookup.h"
#include "sync/resp.h"
#include "sync/state_sync_metrics.h"
#include "sync/sync_keys.h"

namespace prefixgate::sync {

// Sync thread only, except replicaLoads() and liveReplicas() (any thread). Everything given must outlive it.
class LoadChannel {
 public:
  using ByReplica = std::map<std::string, int32_t, std::less<>>;  // replica id -> in-flight count
  using ByPod = std::map<std::string, ByReplica, std::less<>>;    // pod address -> its counts
  // What one read of the other replicas' counts found.
  struct Read {
    ByPod by_pod;                   // pods this replica routes to only
    std::vector<std::string> live;  // the other replicas whose heartbeat is alive
    std::vector<std::string> gone;  // those named in the replicas set whose heartbeat expired
  };

  LoadChannel(const config::StateSyncConfig& config, const SyncKeys& keys, std::string_view replica_id,
              discovery::PodRegistry& pods, PodLookup& lookup, StateSyncMetrics& metrics);

  // This replica's heartbeat: SET of its counts (PX replica_ttl_ms), SADD to the replicas set, SMEMBERS of it.
  static constexpr size_t kPublishCommands = 3;
  void appendPublish(std::string& commands) const;
  // The other replicas in SMEMBERS's reply (the last of appendPublish's).
  std::vector<std::string> others(const RedisReply& members) const;
  // MGET of the counts of `others` (one command).
  void appendRead(std::string& commands, const std::vector<std::string>& others) const;
  // MGET's reply, one value per replica of `others` in order (nil: its heartbeat expired).
  Read decode(const std::vector<std::string>& others, const RedisReply& values);
  // SREM of the replicas whose heartbeat expired (one command).
  void appendForget(std::string& commands, const std::vector<std::string>& gone) const;
  // Sets each pod's remote count from `read`, taken at `now_ms` (steady).
  void apply(Read read, int64_t now_ms);
  // Drops the others' counts once none was read for replica_ttl_ms: they must not outlive their heartbeats while
  // the writer waits (up to state_sync.timeout_ms) on a slow Redis.
  void expireIfStale(int64_t now_ms);

  // Each other live replica's count on the pod at `address` (for /debug/pods). Any thread.
  std::vector<std::pair<std::string, int32_t>> replicaLoads(std::string_view address) const;
  // The other live replicas seen by the last read. Any thread.
  std::vector<std::string> liveReplicas() const;

 private:
  void setRemoteLoads(ByPod by_pod, size_t other_replicas);

  const uint32_t replica_ttl_ms_;
  const SyncKeys& keys_;
  const std::string replica_id_;
  discovery::PodRegistry& pods_;
  PodLookup& lookup_;
  StateSyncMetrics& metrics_;
  std::atomic<int64_t> last_read_ms_{0};  // steady
  // Shared with readers of /debug.
  mutable std::mutex view_mutex_;
  ByPod by_pod_;                             // guarded by view_mutex_
  std::vector<std::string> live_replicas_;  // guarded by view_mutex_
};

}  // namespace prefixgate::sync
