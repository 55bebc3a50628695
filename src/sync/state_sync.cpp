#include "sync/state_sync.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <random>

#include "routing/router.h"
#include "sync/record_batch.h"
#include "util/log.h"

namespace prefixgate::sync {
namespace asio = boost::asio;
using std::chrono::milliseconds;

namespace {

int64_t wallNowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string defaultReplicaId() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof(host), "gateway");
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof(suffix), "%06x", static_cast<unsigned>(rd() & 0xffffff));
  return std::string(host) + "-" + suffix;
}

// A stream entry id "<ms>-<seq>" as a comparable pair; {0, 0} when malformed.
std::pair<uint64_t, uint64_t> streamId(std::string_view id) {
  const size_t dash = id.find('-');
  uint64_t ms = 0, seq = 0;
  const std::string_view a = id.substr(0, dash);
  if (std::from_chars(a.data(), a.data() + a.size(), ms).ec != std::errc{}) return {0, 0};
  if (dash != std::string_view::npos) {
    const std::string_view b = id.substr(dash + 1);
    if (std::from_chars(b.data(), b.data() + b.size(), seq).ec != std::errc{}) return {0, 0};
  }
  return {ms, seq};
}

// A sorted set's score (integer milliseconds, as written here); 0 when malformed or negative (a time before 1970
// would only make the age arithmetic meet INT64_MIN).
int64_t scoreMs(std::string_view score) {
  int64_t ms = 0;
  std::from_chars(score.data(), score.data() + score.size(), ms);
  return std::max<int64_t>(ms, 0);
}

// What one reply may hold: the larger snapshot read (members and scores), with room for every other read (a
// stream read of 256 entries, the replicas set, their loads: a few thousand elements). Redis answers what anyone
// wrote there, so the bound is this replica's own, not the writers'.
constexpr size_t kOtherReplyElements = 1u << 16;
RespParser::Limits replyLimits(const config::StateSyncConfig& config, const routing::SessionTable* sessions) {
  RespParser::Limits limits;
  const size_t members =
      std::max<size_t>(config.snapshot_max_records, sessions ? sessions->settings().max_sessions : 0);
  limits.max_reply_elements = 2 * members + kOtherReplyElements;
  return limits;
}

const RedisReply* field(const RedisReply& flat, std::string_view name) {
  for (size_t i = 0; i + 1 < flat.elements.size(); i += 2)
    if (flat.elements[i].str == name) return &flat.elements[i + 1];
  return nullptr;
}

}  // namespace

// ---- metrics ----

struct StateSync::Metrics {
  explicit Metrics(prometheus::Registry& registry)
      : records(prometheus::BuildCounter()
                    .Name("prefixgate_state_sync_records_total")
                    .Help("Prefix records shared with the other replicas through Redis (sent) and applied from them "
                          "(received, stream and snapshot)")
                    .Register(registry)),
        dropped(prometheus::BuildCounter()
                    .Name("prefixgate_state_sync_records_dropped_total")
                    .Help("Prefix records not shared or not applied: over_rate (state_sync.max_send_bytes_per_second), "
                          "pending_full (state_sync.max_pending_bytes while Redis is away), unknown_pod (a pod this "
                          "replica does not route to), malformed (a batch it cannot read)")
                    .Register(registry)),
        sessions(prometheus::BuildCounter()
                     .Name("prefixgate_state_sync_sessions_total")
                     .Help("Session pins (session-affinity) shared with the other replicas through Redis (sent: new "
                           "pins, moves and refreshes) and applied from them (received, stream and snapshot)")
                     .Register(registry)),
        sessions_dropped(prometheus::BuildCounter()
                             .Name("prefixgate_state_sync_sessions_dropped_total")
                             .Help("Session pins not shared or not applied: over_rate, pending_full, unknown_pod (a "
                                   "pod this replica does not route to), malformed (a batch or member it cannot read)")
                             .Register(registry)),
        bytes(prometheus::BuildCounter()
                  .Name("prefixgate_state_sync_bytes_total")
                  .Help("Bytes of Redis commands sent and replies received by state sync")
                  .Register(registry)),
        lag(prometheus::BuildHistogram()
                .Name("prefixgate_state_sync_lag_seconds")
                .Help("From a replica's routing decision to another replica applying its record (wall clocks)")
                .Register(registry)),
        snapshot_loads(prometheus::BuildCounter()
                           .Name("prefixgate_state_sync_snapshot_loads_total")
                           .Help("Snapshots of the shared records loaded (at start, and after missing part of the stream)")
                           .Register(registry)),
        errors(prometheus::BuildCounter()
                   .Name("prefixgate_state_sync_redis_errors_total")
                   .Help("Redis commands that failed (connection lost, timeout, error reply)")
                   .Register(registry)),
        reconnects(prometheus::BuildCounter()
                       .Name("prefixgate_state_sync_reconnects_total")
                       .Help("Connections to Redis opened again after one was lost")
                       .Register(registry)),
        connected(prometheus::BuildGauge()
                      .Name("prefixgate_state_sync_connected")
                      .Help("1 while the last exchange with Redis succeeded")
                      .Register(registry)),
        replicas(prometheus::BuildGauge()
                     .Name("prefixgate_state_sync_replicas")
                     .Help("Live replicas seen in Redis, this one included")
                     .Register(registry)),
        sent(records.Add({{"direction", "sent"}})),
        received(records.Add({{"direction", "received"}})),
        over_rate(dropped.Add({{"reason", "over_rate"}})),
        pending_full(dropped.Add({{"reason", "pending_full"}})),
        unknown_pod(dropped.Add({{"reason", "unknown_pod"}})),
        malformed(dropped.Add({{"reason", "malformed"}})),
        sessions_sent(sessions.Add({{"direction", "sent"}})),
        sessions_received(sessions.Add({{"direction", "received"}})),
        sessions_over_rate(sessions_dropped.Add({{"reason", "over_rate"}})),
        sessions_pending_full(sessions_dropped.Add({{"reason", "pending_full"}})),
        sessions_unknown_pod(sessions_dropped.Add({{"reason", "unknown_pod"}})),
        sessions_malformed(sessions_dropped.Add({{"reason", "malformed"}})),
        bytes_sent(bytes.Add({{"direction", "sent"}})),
        bytes_received(bytes.Add({{"direction", "received"}})),
        lag_seconds(lag.Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
                                                                         0.2, 0.5, 1, 2, 5, 10})),
        snapshot_loads_total(snapshot_loads.Add({})),
        errors_total(errors.Add({})),
        reconnects_total(reconnects.Add({})),
        connected_gauge(connected.Add({})),
        replicas_gauge(replicas.Add({})) {}
  prometheus::Family<prometheus::Counter>& records;
  prometheus::Family<prometheus::Counter>& dropped;
  prometheus::Family<prometheus::Counter>& sessions;
  prometheus::Family<prometheus::Counter>& sessions_dropped;
  prometheus::Family<prometheus::Counter>& bytes;
  prometheus::Family<prometheus::Histogram>& lag;
  prometheus::Family<prometheus::Counter>& snapshot_loads;
  prometheus::Family<prometheus::Counter>& errors;
  prometheus::Family<prometheus::Counter>& reconnects;
  prometheus::Family<prometheus::Gauge>& connected;
  prometheus::Family<prometheus::Gauge>& replicas;
  prometheus::Counter& sent;
  prometheus::Counter& received;
  prometheus::Counter& over_rate;
  prometheus::Counter& pending_full;
  prometheus::Counter& unknown_pod;
  prometheus::Counter& malformed;
  prometheus::Counter& sessions_sent;
  prometheus::Counter& sessions_received;
  prometheus::Counter& sessions_over_rate;
  prometheus::Counter& sessions_pending_full;
  prometheus::Counter& sessions_unknown_pod;
  prometheus::Counter& sessions_malformed;
  prometheus::Counter& bytes_sent;
  prometheus::Counter& bytes_received;
  prometheus::Histogram& lag_seconds;
  prometheus::Counter& snapshot_loads_total;
  prometheus::Counter& errors_total;
  prometheus::Counter& reconnects_total;
  prometheus::Gauge& connected_gauge;
  prometheus::Gauge& replicas_gauge;
};

// ---- StateSync ----

StateSync::StateSync(const config::StateSyncConfig& config, std::chrono::nanoseconds record_expiry,
                     bool share_records, discovery::PodRegistry& pods, routing::PrefixServices* prefix,
                     routing::SessionTable* sessions, prometheus::Registry& registry)
    : config_(config),
      expiry_(std::chrono::duration_cast<milliseconds>(
          std::min<std::chrono::nanoseconds>(record_expiry, std::chrono::hours(24 * 365)))),
      share_records_(share_records && prefix != nullptr),
      replica_id_(config.replica_id.empty() ? defaultReplicaId() : config.replica_id),
      pods_(pods),
      prefix_(prefix),
      sessions_(sessions),
      metrics_(std::make_unique<Metrics>(registry)),
      outbox_(config.max_pending_bytes, config.max_send_bytes_per_second, config.max_blocks_per_record) {
  std::string error;
  parseRedisUrl(config.redis, address_, error);  // validated with the config
  const RespParser::Limits limits = replyLimits(config, sessions);
  writer_ = std::make_unique<RedisConnection>(io_, address_, milliseconds(config.timeout_ms), limits);
  reader_ = std::make_unique<RedisConnection>(io_, address_, milliseconds(config.timeout_ms), limits);
}

StateSync::~StateSync() { stop(); }

void StateSync::start() {
  log::info("state sync: replica {} shares {}{}in-flight counts through redis {}:{} (keys {}:*)", replica_id_,
            share_records_ ? "prefix records, " : "", sessions_ ? "session pins, " : "", address_.host,
            address_.port, config_.key_prefix);
  asio::co_spawn(io_, writerLoop(), asio::detached);
  asio::co_spawn(io_, staleLoadWatch(), asio::detached);
  if (share_records_ || sessions_) asio::co_spawn(io_, readerLoop(), asio::detached);
  thread_ = std::thread([this] { io_.run(); });
}

void StateSync::stop() {
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

void StateSync::recordWritten(std::string_view model, std::span<const BlockHash> hashes,
                              const discovery::PodState& pod) {
  if (!share_records_) return;
  switch (outbox_.add(wallNowMs(), routing::steadyNowMs(), model, pod.spec().address, hashes)) {
    case Outbox::Added::kQueued: break;
    case Outbox::Added::kOverRate: metrics_->over_rate.Increment(); break;
    case Outbox::Added::kFull: metrics_->pending_full.Increment(); break;
  }
}

void StateSync::sessionPinned(std::string_view id, const discovery::PodState& pod, int64_t pinned_ago_ms) {
  const int64_t wall = wallNowMs();
  switch (outbox_.addSession(routing::steadyNowMs(), SessionPin{wall, wall - pinned_ago_ms, id, pod.spec().address})) {
    case Outbox::Added::kQueued: break;
    case Outbox::Added::kOverRate: metrics_->sessions_over_rate.Increment(); break;
    case Outbox::Added::kFull: metrics_->sessions_pending_full.Increment(); break;
  }
}

asio::awaitable<void> StateSync::pause(milliseconds duration) {
  asio::steady_timer timer(io_, duration);
  co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
}

void StateSync::countReconnects(const RedisConnection& conn, uint64_t& seen) {
  const uint64_t now = conn.connects();
  if (now > seen && seen > 0) metrics_->reconnects_total.Increment(static_cast<double>(now - seen));
  seen = std::max(seen, now);
}

asio::awaitable<void> StateSync::writerLoop() {
  const milliseconds flush(config_.flush_interval_ms);
  const milliseconds backoff_max(config_.reconnect_max_ms);
  milliseconds backoff(50);
  int64_t next_load = 0, next_snapshot = 0;
  uint64_t connects_seen = 0;
  bool failing = false;
  for (;;) {
    co_await pause(flush);
    const int64_t now = routing::steadyNowMs();
    const int64_t wall = wallNowMs();
    std::string commands;
    size_t count = 0;
    Outbox::Taken batch = outbox_.take();
    const bool do_send = batch.count > 0 || batch.session_count > 0;
    if (do_send) {
      // The snapshots learn the batch's records and pins (newest time per member) at their next update.
      std::string_view in = batch.records;
      Record r;
      std::string error;
      while (!in.empty() && readRecord(in, r, error)) {
        if (snapshot_pending_.size() >= config_.snapshot_max_records) break;
        int64_t& newest = snapshot_pending_[encodeKey(r.model, r.pod, r.hashes)];
        newest = std::max(newest, r.wall_ms);
      }
      in = batch.sessions;
      SessionPin pin;
      while (sessions_ && !in.empty() && readSession(in, pin, error)) {
        if (session_snapshot_pending_.size() >= sessions_->settings().max_sessions) break;
        int64_t& newest = session_snapshot_pending_[encodeSessionKey(pin)];
        newest = std::max(newest, pin.wall_ms);
      }
      // One stream entry: the records (field d) and the pins (field s) of this flush, each only when there are any.
      const std::string stream_key = key("records");
      const std::string max_entries = std::to_string(config_.stream_max_entries);
      std::vector<std::string_view> xadd = {"XADD", stream_key, "MAXLEN", "~", max_entries, "*", "r", replica_id_};
      std::string batch_bytes, session_bytes;
      if (batch.count > 0) {
        batch_bytes = makeBatch(batch.records, batch.count);
        xadd.insert(xadd.end(), {"d", batch_bytes});
      }
      if (batch.session_count > 0) {
        session_bytes = makeSessionBatch(batch.sessions, batch.session_count);
        xadd.insert(xadd.end(), {"s", session_bytes});
      }
      appendCommand(commands, xadd);
      ++count;
    }
    const bool do_load = now >= next_load;
    if (do_load) {
      std::vector<std::pair<std::string, int32_t>> loads;
      for (const discovery::PodPtr& pod : pods_.snapshot()->pods())
        loads.emplace_back(pod->spec().address, pod->inFlight());
      appendCommand(commands, {"SET", key("load:" + replica_id_), encodeLoads(loads), "PX",
                               std::to_string(config_.replica_ttl_ms)});
      appendCommand(commands, {"SADD", key("replicas"), replica_id_});
      appendCommand(commands, {"SMEMBERS", key("replicas")});
      count += 3;
    }
    const bool do_snapshot =
        now >= next_snapshot && (!snapshot_pending_.empty() || !session_snapshot_pending_.empty());
    if (do_snapshot) snapshotCommands(commands, count, wall);
    if (count == 0) continue;
    RedisConnection::Result result = co_await writer_->run(std::move(commands), count);
    countReconnects(*writer_, connects_seen);
    if (!result.ok()) {
      metrics_->errors_total.Increment();
      connected_.store(false, std::memory_order_relaxed);
      metrics_->connected_gauge.Set(0);
      if (!failing) log::warn("state sync: redis {}:{} failed ({}); routing goes on with this replica's own index and "
                              "counts, records wait (up to state_sync.max_pending_bytes)",
                              address_.host, address_.port, result.error);
      failing = true;
      if (do_send) {
        const Outbox::Dropped dropped = outbox_.putBack(std::move(batch));
        metrics_->pending_full.Increment(static_cast<double>(dropped.records));
        metrics_->sessions_pending_full.Increment(static_cast<double>(dropped.sessions));
      }
      co_await pause(backoff);
      backoff = std::min(backoff * 2, backoff_max);
      continue;
    }
    if (failing) log::info("state sync: redis {}:{} answers again", address_.host, address_.port);
    failing = false;
    backoff = milliseconds(50);
    connected_.store(true, std::memory_order_relaxed);
    metrics_->connected_gauge.Set(1);
    metrics_->bytes_sent.Increment(static_cast<double>(result.bytes_sent));
    metrics_->bytes_received.Increment(static_cast<double>(result.bytes_received));
    for (const RedisReply& reply : result.replies)
      if (reply.isError()) {
        metrics_->errors_total.Increment();
        warnRedisError("redis answered", reply.str);
      }
    size_t at = 0;
    if (do_send) {
      if (!result.replies[at].isError()) {
        metrics_->sent.Increment(static_cast<double>(batch.count));
        metrics_->sessions_sent.Increment(static_cast<double>(batch.session_count));
      }
      ++at;
    }
    if (do_load) {
      next_load = now + config_.load_interval_ms;
      co_await exchangeLoads(*writer_, result.replies[at + 2]);
      at += 3;
    }
    if (do_snapshot) {
      snapshot_pending_.clear();
      session_snapshot_pending_.clear();
      next_snapshot = now + config_.snapshot_interval_ms;
    }
  }
}

// ZADD of what the snapshots lack, then their trims: records to the index expiry and snapshot_max_records, pins to
// the session TTL and max_sessions.
void StateSync::snapshotCommands(std::string& commands, size_t& count, int64_t wall) {
  const auto add = [&](const std::string& snapshot_key, const std::map<std::string, int64_t, std::less<>>& pending,
                       int64_t max_age_ms, uint64_t max_members) {
    if (pending.empty()) return;
    std::vector<std::string> scores;
    scores.reserve(pending.size());
    for (const auto& [member, ms] : pending) scores.push_back(std::to_string(ms));
    std::vector<std::string_view> args = {"ZADD", snapshot_key};
    size_t i = 0;
    for (const auto& [member, ms] : pending) {
      args.push_back(scores[i++]);
      args.push_back(member);
    }
    appendCommand(commands, args);
    const std::string oldest = "(" + std::to_string(wall - max_age_ms);
    appendCommand(commands, {"ZREMRANGEBYSCORE", snapshot_key, "-inf", oldest});
    const std::string keep = "-" + std::to_string(max_members + 1);
    appendCommand(commands, {"ZREMRANGEBYRANK", snapshot_key, "0", keep});
    count += 3;
  };
  add(key("snapshot"), snapshot_pending_, expiry_.count(), config_.snapshot_max_records);
  if (sessions_)
    add(key("sessions"), session_snapshot_pending_, sessions_->settings().ttl_ms, sessions_->settings().max_sessions);
}

asio::awaitable<void> StateSync::staleLoadWatch() {
  // The writer may wait up to state_sync.timeout_ms on a slow Redis: the others' counts must not outlive their
  // heartbeats meanwhile.
  for (;;) {
    co_await pause(milliseconds(config_.load_interval_ms));
    if (routing::steadyNowMs() - last_load_read_ms_ > static_cast<int64_t>(config_.replica_ttl_ms)) setRemoteLoads({}, 0);
  }
}

asio::awaitable<void> StateSync::exchangeLoads(RedisConnection& conn, const RedisReply& members) {
  std::vector<std::string> others;
  for (const RedisReply& m : members.elements)
    if (m.type == RedisReply::Type::kBulk && m.str != replica_id_) others.push_back(m.str);
  std::map<std::string, std::map<std::string, int32_t, std::less<>>, std::less<>> by_pod;
  std::vector<std::string> live;
  if (!others.empty()) {
    std::string commands;
    std::vector<std::string> keys;
    for (const std::string& id : others) keys.push_back(key("load:" + id));
    std::vector<std::string_view> args = {"MGET"};
    for (const std::string& k : keys) args.push_back(k);
    appendCommand(commands, args);
    RedisConnection::Result result = co_await conn.run(std::move(commands), 1);
    if (!result.ok() || result.replies[0].isError()) {
      metrics_->errors_total.Increment();
      co_return;
    }
    metrics_->bytes_sent.Increment(static_cast<double>(result.bytes_sent));
    metrics_->bytes_received.Increment(static_cast<double>(result.bytes_received));
    std::string gone;
    std::vector<std::string_view> srem = {"SREM", ""};
    const std::string replicas_key = key("replicas");
    srem[1] = replicas_key;
    const auto& values = result.replies[0].elements;
    for (size_t i = 0; i < others.size() && i < values.size(); ++i) {
      if (values[i].isNil()) {
        srem.push_back(others[i]);  // its heartbeat expired: it is gone
        continue;
      }
      live.push_back(others[i]);
      std::map<std::string, int32_t, std::less<>> loads;
      decodeLoads(values[i].str, loads);
      // Only pods this replica routes to: a text naming made-up addresses must not grow what is kept.
      for (const auto& [address, n] : loads)
        if (podAt(address)) by_pod[address][others[i]] = n;
    }
    if (srem.size() > 2) {
      std::string cleanup;
      appendCommand(cleanup, srem);
      co_await conn.run(std::move(cleanup), 1);
    }
  }
  last_load_read_ms_ = routing::steadyNowMs();
  metrics_->replicas_gauge.Set(static_cast<double>(live.size() + 1));
  const size_t live_others = live.size();
  {
    std::lock_guard lock(view_mutex_);
    live_replicas_ = std::move(live);
  }
  setRemoteLoads(std::move(by_pod), live_others);
}

void StateSync::setRemoteLoads(std::map<std::string, std::map<std::string, int32_t, std::less<>>, std::less<>> by_pod,
                               size_t other_replicas) {
  for (const discovery::PodPtr& pod : pods_.snapshot()->pods()) {
    auto it = by_pod.find(pod->spec().address);
    const int32_t sum = it == by_pod.end() ? 0 : sumLoads(it->second);
    pod->setRemoteInFlight(sum, static_cast<int32_t>(std::min<size_t>(other_replicas, kMaxOtherReplicas)));
  }
  std::lock_guard lock(view_mutex_);
  if (other_replicas == 0) live_replicas_.clear();
  loads_by_pod_ = std::move(by_pod);
}

asio::awaitable<void> StateSync::readerLoop() {
  const milliseconds backoff_max(config_.reconnect_max_ms);
  milliseconds backoff(50);
  constexpr milliseconds kBlock(1000);
  uint64_t connects_seen = 0;
  bool need_snapshot = true;
  bool check_trim = false;
  for (;;) {
    bool ok = true;
    if (need_snapshot) {
      ok = co_await loadSnapshot(*reader_);
      if (ok) need_snapshot = check_trim = false;
    } else if (check_trim) {
      // After an outage: if the stream lost entries past our position (trimmed, or Redis restarted and the
      // stream was rebuilt), the snapshot has what they said.
      std::string commands;
      appendCommand(commands, {"XINFO", "STREAM", key("records")});
      RedisConnection::Result result = co_await reader_->run(std::move(commands), 1);
      ok = result.ok();
      if (ok) {
        check_trim = false;
        const RedisReply& info = result.replies[0];
        if (!info.isError()) {
          // Redis 7 keeps the highest id it ever trimmed or deleted from the stream.
          const RedisReply* deleted = field(info, "max-deleted-entry-id");
          const bool lost = deleted && streamId(deleted->str) > streamId(stream_position_);
          if (lost) {
            log::info("state sync: the stream lost entries after {} while away; loading the snapshot",
                      stream_position_);
            need_snapshot = true;
          }
        }
      }
    } else {
      std::string commands;
      appendCommand(commands, {"XREAD", "COUNT", "256", "BLOCK", std::to_string(kBlock.count()), "STREAMS",
                               key("records"), stream_position_});
      RedisConnection::Result result = co_await reader_->run(std::move(commands), 1, kBlock);
      ok = result.ok();
      if (ok) {
        metrics_->bytes_received.Increment(static_cast<double>(result.bytes_received));
        const RedisReply& reply = result.replies[0];
        if (reply.isError()) {
          metrics_->errors_total.Increment();
          warnRedisError("XREAD", reply.str);
          co_await pause(backoff_max);
        }
        const int64_t now_wall = wallNowMs();
        for (const RedisReply& stream : reply.elements) {
          if (stream.elements.size() < 2) continue;
          for (const RedisReply& entry : stream.elements[1].elements) {
            if (entry.elements.size() < 2) continue;
            stream_position_ = entry.elements[0].str;
            const RedisReply* from = field(entry.elements[1], "r");
            if (!from || from->str == replica_id_) continue;
            const RedisReply* data = field(entry.elements[1], "d");
            if (data && share_records_) applyBatch(data->str, now_wall);
            const RedisReply* pins = field(entry.elements[1], "s");
            if (pins && sessions_) applySessions(pins->str, now_wall);
          }
        }
        std::lock_guard lock(view_mutex_);
        position_view_ = stream_position_;
      }
    }
    countReconnects(*reader_, connects_seen);
    if (!ok) {
      metrics_->errors_total.Increment();
      check_trim = !need_snapshot;
      co_await pause(backoff);
      backoff = std::min(backoff * 2, backoff_max);
    } else {
      backoff = milliseconds(50);
    }
  }
}

asio::awaitable<bool> StateSync::loadSnapshot(RedisConnection& conn) {
  const int64_t wall = wallNowMs();
  std::string commands;
  size_t count = 0;
  // The newest members only, as many as the snapshot keeps: another writer may have added any number.
  if (share_records_) {
    appendCommand(commands, {"ZREVRANGEBYSCORE", key("snapshot"), "+inf",
                             "(" + std::to_string(wall - expiry_.count()), "WITHSCORES", "LIMIT", "0",
                             std::to_string(config_.snapshot_max_records)});
    ++count;
  }
  if (sessions_) {
    appendCommand(commands, {"ZREVRANGEBYSCORE", key("sessions"), "+inf",
                             "(" + std::to_string(wall - sessions_->settings().ttl_ms), "WITHSCORES", "LIMIT", "0",
                             std::to_string(sessions_->settings().max_sessions)});
    ++count;
  }
  RedisConnection::Result result = co_await conn.run(std::move(commands), count);
  if (!result.ok()) co_return false;
  metrics_->bytes_received.Increment(static_cast<double>(result.bytes_received));
  for (const RedisReply& reply : result.replies)
    if (reply.isError()) {
      metrics_->errors_total.Increment();
      warnRedisError("loading the snapshot", reply.str);
    }
  // Oldest first (the replies are newest first), so the index's and the session table's LRU orders follow the
  // ages. `i` steps over (member, score) pairs from the last.
  size_t applied = 0, pins = 0, at = 0;
  std::string error;
  if (share_records_) {
    const RedisReply& reply = result.replies[at++];
    Record r;
    for (size_t i = reply.elements.size() & ~size_t{1}; i >= 2;) {
      i -= 2;
      if (!decodeKey(reply.elements[i].str, r, error)) {
        metrics_->malformed.Increment();
        continue;
      }
      r.wall_ms = scoreMs(reply.elements[i + 1].str);
      applyRecord(r, wall, true);
      ++applied;
    }
  }
  if (sessions_) {
    const RedisReply& reply = result.replies[at++];
    SessionPin pin;
    for (size_t i = reply.elements.size() & ~size_t{1}; i >= 2;) {
      i -= 2;
      if (!decodeSessionKey(reply.elements[i].str, pin, error)) {
        metrics_->sessions_malformed.Increment();
        continue;
      }
      pin.wall_ms = scoreMs(reply.elements[i + 1].str);
      applySession(pin, wall);
      ++pins;
    }
  }
  // The snapshot is up to one snapshot interval (plus a flush) behind the stream: read the stream from a little
  // before that, with a second of margin for clocks. Records and pins applied twice change nothing.
  const int64_t behind = 2 * static_cast<int64_t>(config_.snapshot_interval_ms) + 1000;
  stream_position_ = std::to_string(std::max<int64_t>(0, wall - behind)) + "-0";
  metrics_->snapshot_loads_total.Increment();
  log::info("state sync: loaded a snapshot of {} records and {} session pins; reading the stream from {}", applied,
            pins, stream_position_);
  co_return true;
}

void StateSync::warnRedisError(std::string_view what, std::string_view error) {
  // Error text comes from the server (or whatever answers as one): at most a line of it, at most once a second.
  constexpr size_t kMaxShown = 200;
  if (uint64_t more = 0; redis_error_warnings_.allow(more))
    log::warn("state sync: {}: {}{} ({} more since the last such line)", what, error.substr(0, kMaxShown),
              error.size() > kMaxShown ? "..." : "", more);
}

void StateSync::applyBatch(std::string_view batch, int64_t now_wall_ms) {
  BatchReader reader(batch);
  Record r;
  while (reader.next(r)) applyRecord(r, now_wall_ms, false);
  if (!reader.error().empty()) {
    metrics_->malformed.Increment();
    if (uint64_t more = 0; malformed_warnings_.allow(more))
      log::warn("state sync: a record batch from another replica is malformed: {} ({} more since the last such line)",
                reader.error(), more);
  }
}

void StateSync::applySessions(std::string_view batch, int64_t now_wall_ms) {
  SessionBatchReader reader(batch);
  SessionPin pin;
  while (reader.next(pin)) applySession(pin, now_wall_ms);
  if (!reader.error().empty()) {
    metrics_->sessions_malformed.Increment();
    if (uint64_t more = 0; malformed_warnings_.allow(more))
      log::warn("state sync: a session batch from another replica is malformed: {} ({} more since the last such line)",
                reader.error(), more);
  }
}

void StateSync::applySession(const SessionPin& pin, int64_t now_wall_ms) {
  const discovery::PodState* pod = podAt(pin.pod);
  if (!pod) {
    metrics_->sessions_unknown_pod.Increment();
    return;
  }
  // Wall-clock times from the other replica, as ages, onto the table's steady clock.
  const int64_t now = routing::steadyNowMs();
  const auto local = [&](int64_t wall_ms) { return now - std::max<int64_t>(0, now_wall_ms - wall_ms); };
  sessions_->applyRemote(pin.id, {pod->id(), local(pin.wall_ms), local(pin.pinned_ms)}, now);
  metrics_->sessions_received.Increment();
}

void StateSync::applyRecord(const Record& r, int64_t now_wall_ms, bool from_snapshot) {
  discovery::PodState* pod = podAt(r.pod);
  const auto serves = [&r](const discovery::PodState& p) {
    return std::find(p.spec().models.begin(), p.spec().models.end(), r.model) != p.spec().models.end();
  };
  if (!pod || !serves(*pod)) {
    metrics_->unknown_pod.Increment();
    return;
  }
  if (!from_snapshot) metrics_->lag_seconds.Observe(static_cast<double>(std::max<int64_t>(0, now_wall_ms - r.wall_ms)) / 1000.0);
  prefix_->recordRouted(r.model, r.hashes, *pod, false);
  metrics_->received.Increment();
}

discovery::PodState* StateSync::podAt(std::string_view address) {
  std::shared_ptr<const discovery::PodSet> now = pods_.snapshot();
  if (now != pods_seen_) {
    pods_seen_ = std::move(now);
    by_address_.clear();
    for (const discovery::PodPtr& pod : pods_seen_->pods()) by_address_[pod->spec().address] = pod.get();
  }
  auto it = by_address_.find(address);
  return it == by_address_.end() ? nullptr : it->second;
}

std::vector<std::pair<std::string, int32_t>> StateSync::replicaLoads(std::string_view address) const {
  std::lock_guard lock(view_mutex_);
  std::vector<std::pair<std::string, int32_t>> out;
  if (auto it = loads_by_pod_.find(address); it != loads_by_pod_.end())
    for (const auto& [replica, n] : it->second) out.emplace_back(replica, n);
  return out;
}

StateSync::Status StateSync::status() const {
  Status s;
  s.replica_id = replica_id_;
  s.connected = connected_.load(std::memory_order_relaxed);
  s.shares_records = share_records_;
  std::lock_guard lock(view_mutex_);
  s.replicas = live_replicas_;
  s.stream_position = position_view_;
  return s;
}

}  // namespace prefixgate::sync
