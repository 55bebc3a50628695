#pragma once
// Replica state sync (state_sync.*, docs/state-sync.md): gateway replicas behind one Service share, through a real
// Redis server, the prefix records each routes (standard mode), the sessions each pins (session-affinity) and each
// pod's in-flight count, so every replica routes as if it had seen every request.
//   records   each replica batches the records its index wrote (Outbox) and appends one stream entry every
//             flush_interval_ms (XADD <prefix>:records); every replica reads the stream (XREAD BLOCK) and applies
//             the others' records to its own index. A snapshot (ZSET <prefix>:snapshot: member = record without
//             its time, score = its newest time, trimmed to the index expiry and snapshot_max_records) serves
//             replicas that start late or missed a trimmed part of the stream.
//   sessions  the same way, in the same stream entries (field s) and a second snapshot (ZSET <prefix>:sessions:
//             member = pin without its use time, score = its use time, trimmed to the session TTL and
//             max_sessions); also in KV event mode, where the records are not shared.
//   responses the Responses API's chain affinity (response id -> the pod that produced it, and the ids deleted), the
//             same way (field a) with a third snapshot (ZSET <prefix>:responses: member = id and pod, score = when
//             produced, trimmed to routing.response_affinity.ttl_ms and max_entries); KV event mode too.
//   load      each replica writes its own in-flight counts every load_interval_ms (SET <prefix>:load:<id> PX
//             replica_ttl_ms) and reads the others' (SMEMBERS <prefix>:replicas + MGET): a pod's load is the sum
//             over live replicas, and a replica that dies stops counting when its key expires.
//   flows     with flow control on, beside the load heartbeat: the VTC service each replica's queues gave each flow
//             (SET <prefix>:flow:<id> PX replica_ttl_ms, MGET of the others'); each charges the others' increases
//             to its own flows (flow_channel.h).
// Everything runs on this component's own thread; request threads only append to the outbox (a short lock). When
// Redis is unavailable or slow, routing goes on with the local index and counts, records wait in the outbox
// (bounded), and sync resumes by itself (stream position, or the snapshot when the stream was trimmed).
// StateSync owns the thread, the connections and the loops that talk to Redis (with redis_client.h, the only Asio
// code here); what each channel sends and how what it reads is applied are in record_channel.h, session_channel.h,
// response_channel.h, load_channel.h and snapshot_channel.h, which do no I/O.
#include <prometheus/registry.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "prefixgate/types.h"
#include "routing/prefix/prefix_services.h"
#include "routing/response_affinity.h"
#include "routing/session_table.h"
#include "flow/service_sharing.h"
#include "sync/flow_channel.h"
#include "sync/load_channel.h"
#include "sync/outbox.h"
#include "sync/pod_lookup.h"
#include "sync/record_channel.h"
#include "sync/redis_client.h"
#include "sync/response_channel.h"
#include "sync/session_channel.h"
#include "sync/snapshot_channel.h"
#include "sync/state_sync_metrics.h"
#include "sync/sync_keys.h"
#include "util/log.h"

namespace prefixgate::sync {

class StateSync final : public routing::RecordSink, public routing::SessionSink, public routing::ResponseSink {
 public:
  struct Status {
    std::string replica_id;
    bool connected = false;
    bool shares_records = false;
    std::vector<std::string> replicas;  // the live replicas seen by the last load read (others)
    std::string stream_position;
  };
  // `prefix` may be null (no prefix strategy) and `share_records` false (KV event sync: each replica subscribes to
  // the engines itself; records do not go through Redis). `record_expiry`: the index's expiry (the snapshot keeps
  // records no longer). `sessions`: the session-affinity table whose pins are shared (null: none are). Everything
  // given must outlive this. `flow_service`: flow control's queues, whose service is shared (null: flow control is
  // off, and nothing of it goes through Redis). `responses`: the Responses API's chain affinity whose ids are shared
  // (null, or max_entries 0: none are).
  StateSync(const config::StateSyncConfig& config, std::chrono::nanoseconds record_expiry, bool share_records,
            discovery::PodRegistry& pods, routing::PrefixServices* prefix, routing::SessionTable* sessions,
            prometheus::Registry& registry, flow::ServiceSharing* flow_service = nullptr,
            routing::ResponseAffinity* responses = nullptr);
  ~StateSync();
  StateSync(const StateSync&) = delete;
  StateSync& operator=(const StateSync&) = delete;

  void start();
  void stop();

  // RecordSink: called by request threads for each record their index wrote, and each they took back.
  void recordWritten(std::string_view model, std::span<const BlockHash> hashes,
                     const discovery::PodState& pod) override;
  void recordWithdrawn(std::string_view model, std::span<const BlockHash> hashes, size_t keep,
                       const discovery::PodState& pod) override;
  // SessionSink: called by request threads for each pin their session table made or refreshed.
  void sessionPinned(std::string_view id, const discovery::PodState& pod, int64_t pinned_ago_ms) override;
  // ResponseSink: called by request threads for each response id remembered or forgotten (`pod` by name).
  void responseRemembered(std::string_view id, std::string_view pod) override;
  void responseForgotten(std::string_view id, std::string_view pod) override;

  // Each other live replica's in-flight count on the pod at `address` (for /debug/pods). Any thread.
  std::vector<std::pair<std::string, int32_t>> replicaLoads(std::string_view address) const;
  Status status() const;
  const std::string& replicaId() const { return replica_id_; }

 private:
  boost::asio::awaitable<void> writerLoop();
  boost::asio::awaitable<void> readerLoop();
  boost::asio::awaitable<bool> loadSnapshot(RedisConnection& conn);
  boost::asio::awaitable<bool> streamLostEntries(RedisConnection& conn, bool& lost);
  boost::asio::awaitable<bool> readStream(RedisConnection& conn);
  boost::asio::awaitable<void> staleLoadWatch();
  boost::asio::awaitable<void> exchangeLoads(RedisConnection& conn, const RedisReply& members);
  boost::asio::awaitable<void> pause(std::chrono::milliseconds duration);
  // One stream entry of this flush's records (field d) and pins (field s), each only when there are any.
  void appendStreamEntry(std::string& commands, const Outbox::Taken& batch) const;
  // Applies the other replicas' entries of an XREAD reply and moves the stream position past them.
  void applyStreamEntries(const RedisReply& reply, int64_t now_wall_ms);
  void countReconnects(const RedisConnection& conn, uint64_t& seen);
  void warnRedisError(std::string_view what, std::string_view error);
  void queueResponse(std::string_view id, std::string_view pod, bool remembered);

  const config::StateSyncConfig config_;
  const std::string replica_id_;
  const SyncKeys keys_;
  std::unique_ptr<StateSyncMetrics> metrics_;
  Outbox outbox_;
  // What another replica or Redis sends can repeat a warning at will: one line a second per kind.
  log::Throttle malformed_warnings_;
  log::Throttle redis_error_warnings_;
  // The channels (sync thread only, but for the loads' /debug views). Before io_: the loops' frames, which io_
  // destroys, outlive nothing they use.
  discovery::PodRegistry& pods_;  // our own ids' pods, from name to address (any thread)
  PodLookup pod_lookup_;
  std::unique_ptr<RecordChannel> records_;    // null: records are not shared (no prefix strategy, KV event sync)
  std::unique_ptr<SessionChannel> sessions_;  // null: no session pins are shared
  std::unique_ptr<ResponseChannel> responses_;  // null: no response ids are shared
  LoadChannel loads_;
  std::unique_ptr<FlowChannel> flows_;  // null: flow control is off
  SnapshotChannel snapshots_;
  boost::asio::io_context io_{1};
  RedisAddress address_;
  std::unique_ptr<RedisConnection> writer_;
  std::unique_ptr<RedisConnection> reader_;
  std::thread thread_;
  std::atomic<bool> connected_{false};
  std::string stream_position_;  // the last stream entry read (sync thread)
  // Shared with readers of /debug (guarded).
  mutable std::mutex view_mutex_;
  std::string position_view_;
};

}  // namespace prefixgate::sync
