#pragma once
// The flow service channel of state sync (state_sync.h; docs/state-sync.md, "Flow service"): with flow control on,
// each replica publishes beside its load heartbeat the VTC service its own queues gave each flow, and charges the
// other live replicas' increases to its own flows, so that a tenant served a lot on one replica waits behind the
// others on every replica. The commands are built and the replies decoded here; StateSync runs them on Redis.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "flow/service_sharing.h"
#include "sync/flow_service_entries.h"
#include "sync/resp.h"
#include "sync/state_sync_metrics.h"
#include "sync/sync_keys.h"
#include "util/log.h"

namespace prefixgate::sync {

// The other replicas whose flow service is read (the first ones by id): each costs up to kMaxFlowServiceBytes a
// read and its last text's flows in memory, and the replicas set may name any number.
inline constexpr size_t kMaxFlowServiceReplicas = 64;

// Turns each other replica's cumulative totals into what it served since its previous text read here. Pure: no
// I/O, no clock, no locks (sync thread only).
//   - a replica's first text read here is a baseline: nothing is charged (what it served before is history a
//     replica that starts late does not owe to anyone);
//   - a flow listed before with the same flow_seq: its increase (never a decrease);
//   - a flow not listed before: its whole total when it was created since the previous text (flow_seq at or past
//     the model's flows_created then; a model new to the replica's list counts as created since), else a baseline
//     (it was left out of the bounded list before, and its total holds service already charged);
//   - a flow listed before under another flow_seq was forgotten and created again: the same rule, so a restarted
//     replica that keeps its id costs at most the service it gave before its first text, never a double charge.
// What is remembered is each replica's last text only, so memory is bounded by the texts read.
class FlowServiceDeltas {
 public:
  std::vector<flow::RemoteService> update(const std::string& replica, const std::vector<flow::ModelService>& models);
  void forget(const std::string& replica) { replicas_.erase(replica); }
  // Forgets every replica not in `live` (gone, or beyond kMaxFlowServiceReplicas).
  void keepOnly(const std::vector<std::string>& live);
  size_t replicaCount() const { return replicas_.size(); }

 private:
  struct Seen {
    uint64_t flow_seq = 0;
    double total = 0;
  };
  struct ModelMemory {
    uint64_t flows_created = 0;
    std::map<std::pair<std::string, std::string>, Seen> flows;  // (class, tenant)
  };
  using ReplicaMemory = std::map<std::string, ModelMemory, std::less<>>;  // by model
  std::map<std::string, ReplicaMemory, std::less<>> replicas_;
};

// Sync thread only. Everything given must outlive it.
class FlowChannel {
 public:
  // `malformed_warnings`: shared with the other channels (at most one line a second in all).
  FlowChannel(const config::StateSyncConfig& config, const SyncKeys& keys, std::string_view replica_id,
              flow::ServiceSharing& sharing, StateSyncMetrics& metrics, log::Throttle& malformed_warnings);

  // SET of this replica's totals (PX replica_ttl_ms), sent with the load heartbeat (one command).
  static constexpr size_t kPublishCommands = 1;
  void appendPublish(std::string& commands) const;
  // The replicas of `others` (the load channel's) whose totals are read: at most kMaxFlowServiceReplicas, by id.
  static std::vector<std::string> readable(std::vector<std::string> others);
  // MGET of the totals of `readable` (one command).
  void appendRead(std::string& commands, const std::vector<std::string>& readable) const;
  // MGET's reply, one value per replica of `readable` in order (nil: none published or expired): charges the
  // increases to this replica's flows. Replicas not in `readable` are forgotten.
  void apply(const std::vector<std::string>& readable, const RedisReply& values);

 private:
  const uint32_t replica_ttl_ms_;
  const SyncKeys& keys_;
  const std::string replica_id_;
  flow::ServiceSharing& sharing_;
  StateSyncMetrics& metrics_;
  log::Throttle& malformed_warnings_;
  FlowServiceDeltas deltas_;
};

}  // namespace prefixgate::sync
