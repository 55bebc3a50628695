#pragma once
// Replica state sync (state_sync.*, docs/state-sync.md): gateway replicas behind one Service share, through a real
// Redis server, the prefix records each routes (standard mode) and each pod's in-flight count, so every replica
// routes as if it had seen every request.
//   records   each replica batches the records its index wrote (Outbox) and appends one stream entry every
//             flush_interval_ms (XADD <prefix>:records); every replica reads the stream (XREAD BLOCK) and applies
//             the others' records to its own index. A snapshot (ZSET <prefix>:snapshot: member = record without
//             its time, score = its newest time, trimmed to the index expiry and snapshot_max_records) serves
//             replicas that start late or missed a trimmed part of the stream.
//   load      each replica writes its own in-flight counts every load_interval_ms (SET <prefix>:load:<id> PX
//             replica_ttl_ms) and reads the others' (SMEMBERS <prefix>:replicas + MGET): a pod's load is the sum
//             over live replicas, and a replica that dies stops counting when its key expires.
// Everything runs on this component's own thread; request threads only append to the outbox (a short lock). When
// Redis is unavailable or slow, routing goes on with the local index and counts, records wait in the outbox
// (bounded), and sync resumes by itself (stream position, or the snapshot when the stream was trimmed).
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config/config.h"
#include "discovery/pod_set.h"
#include "prefixgate/types.h"
#include "routing/prefix/prefix_services.h"
#include "sync/redis_client.h"

namespace prefixgate::sync {

// Records waiting to be sent: appended by request threads, taken by the sync thread. Bounded twice: in bytes
// waiting (state_sync.max_pending_bytes: Redis away for long) and in bytes per second (max_send_bytes_per_second:
// a token bucket with one second of burst). Thread-safe.
class Outbox {
 public:
  enum class Added { kQueued, kOverRate, kFull };
  struct Taken {
    std::string records;  // appendRecord's encoding, back to back
    size_t count = 0;
  };
  Outbox(uint64_t max_pending_bytes, uint64_t bytes_per_second, uint32_t max_blocks_per_record);
  // Queues a record of the first max_blocks_per_record blocks of `hashes`. `steady_ms` drives the rate limit.
  Added add(int64_t wall_ms, int64_t steady_ms, std::string_view model, std::string_view pod,
            std::span<const BlockHash> hashes);
  Taken take();
  // Puts back a batch that could not be sent (ahead of what was queued since), as far as the byte bound allows;
  // returns how many records did not fit and were dropped.
  size_t putBack(Taken taken);
  size_t pendingBytes() const;

 private:
  const uint64_t max_pending_bytes_;
  const uint64_t bytes_per_second_;
  const uint32_t max_blocks_;
  mutable std::mutex mutex_;
  Taken pending_;
  double tokens_;  // the rate limit's bucket, in bytes
  int64_t refilled_ms_ = 0;
};

// In-flight counts by replica: one replica's published text is "<pod address> <count>\n" per pod with requests in
// flight. Pure.
std::string encodeLoads(const std::vector<std::pair<std::string, int32_t>>& loads);
// Adds each "<address> <count>" line of `text` to `out` (malformed lines are skipped).
void decodeLoads(std::string_view text, std::map<std::string, int32_t, std::less<>>& out);

class StateSync final : public routing::RecordSink {
 public:
  struct Status {
    std::string replica_id;
    bool connected = false;
    bool shares_records = false;
    std::vector<std::string> replicas;  // the live replicas seen by the last load read (others)
    std::string stream_position;
  };
  // `prefix` may be null (no prefix strategy) and `share_records` false (KV event sync: each replica subscribes to
  // the engines itself; only in-flight counts go through Redis). `record_expiry`: the index's expiry (the
  // snapshot keeps records no longer). Everything given must outlive this.
  StateSync(const config::StateSyncConfig& config, std::chrono::nanoseconds record_expiry, bool share_records,
            discovery::PodRegistry& pods, routing::PrefixServices* prefix, prometheus::Registry& registry);
  ~StateSync();
  StateSync(const StateSync&) = delete;
  StateSync& operator=(const StateSync&) = delete;

  void start();
  void stop();

  // RecordSink: called by request threads for each record their index wrote.
  void recordWritten(std::string_view model, std::span<const BlockHash> hashes,
                     const discovery::PodState& pod) override;

  // Each other live replica's in-flight count on the pod at `address` (for /debug/pods). Any thread.
  std::vector<std::pair<std::string, int32_t>> replicaLoads(std::string_view address) const;
  Status status() const;
  const std::string& replicaId() const { return replica_id_; }

 private:
  struct Metrics;
  boost::asio::awaitable<void> writerLoop();
  boost::asio::awaitable<void> readerLoop();
  boost::asio::awaitable<bool> loadSnapshot(RedisConnection& conn);
  boost::asio::awaitable<bool> streamTrimmedPast(RedisConnection& conn, const std::string& position);
  boost::asio::awaitable<void> staleLoadWatch();
  boost::asio::awaitable<void> exchangeLoads(RedisConnection& conn, const RedisReply& members);
  boost::asio::awaitable<void> pause(std::chrono::milliseconds duration);
  void applyBatch(std::string_view batch, int64_t now_wall_ms);
  void applyRecord(const struct Record& record, int64_t now_wall_ms, bool from_snapshot);
  void setRemoteLoads(std::map<std::string, std::map<std::string, int32_t, std::less<>>, std::less<>> by_pod,
                      size_t other_replicas);
  void countReconnects(const RedisConnection& conn, uint64_t& seen);
  discovery::PodState* podAt(std::string_view address, std::string_view model);
  std::string key(std::string_view suffix) const { return config_.key_prefix + ":" + std::string(suffix); }

  const config::StateSyncConfig config_;
  const std::chrono::milliseconds expiry_;
  const bool share_records_;
  const std::string replica_id_;
  discovery::PodRegistry& pods_;
  routing::PrefixServices* prefix_;
  std::unique_ptr<Metrics> metrics_;
  Outbox outbox_;
  boost::asio::io_context io_{1};
  RedisAddress address_;
  std::unique_ptr<RedisConnection> writer_;
  std::unique_ptr<RedisConnection> reader_;
  std::thread thread_;
  std::atomic<bool> connected_{false};
  // The sync thread's own state.
  std::map<std::string, int64_t, std::less<>> snapshot_pending_;  // key -> newest wall ms, for the next ZADD
  std::shared_ptr<const discovery::PodSet> pods_seen_;
  std::unordered_map<std::string_view, discovery::PodState*> by_address_;  // views into pods_seen_'s specs
  std::string stream_position_;                                           // the last stream entry read
  std::atomic<int64_t> last_load_read_ms_{0};                              // steady
  // Shared with readers of /debug (guarded).
  mutable std::mutex view_mutex_;
  std::map<std::string, std::map<std::string, int32_t, std::less<>>, std::less<>> loads_by_pod_;  // pod -> replica -> n
  std::vector<std::string> live_replicas_;
  std::string position_view_;
};

}  // namespace prefixgate::sync
