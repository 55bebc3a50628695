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

// The age past which the records snapshot drops a record: the index's expiry, capped at a year so that an index
// that never expires still gives a finite score range.
milliseconds snapshotExpiry(std::chrono::nanoseconds record_expiry) {
  return std::chrono::duration_cast<milliseconds>(
      std::min<std::chrono::nanoseconds>(record_expiry, std::chrono::hours(24 * 365)));
}

// What one reply may hold: the larger snapshot read (members and scores), with room for every other read (a
// stream read of 256 entries, the replicas set, their loads: a few thousand elements). Redis answers what anyone
// wrote there, so the bound is this replica's own, not the writers'.
constexpr size_t kOtherReplyElements = 1u << 16;
RespParser::Limits replyLimits(const config::StateSyncConfig& config, const routing::SessionTable* sessions,
                               const ResponseChannel* responses) {
  RespParser::Limits limits;
  const size_t members =
      std::max<size_t>({config.snapshot_max_records, sessions ? sessions->settings().max_sessions : size_t{0},
                        responses ? responses->maxEntries() : size_t{0}});
  limits.max_reply_elements = 2 * members + kOtherReplyElements;
  return limits;
}

const RedisReply* field(const RedisReply& flat, std::string_view name) {
  for (size_t i = 0; i + 1 < flat.elements.size(); i += 2)
    if (flat.elements[i].str == name) return &flat.elements[i + 1];
  return nullptr;
}

}  // namespace

StateSync::StateSync(const config::StateSyncConfig& config, std::chrono::nanoseconds record_expiry,
                     bool share_records, discovery::PodRegistry& pods, routing::PrefixServices* prefix,
                     routing::SessionTable* sessions, prometheus::Registry& registry,
                     flow::ServiceSharing* flow_service, routing::ResponseAffinity* responses)
    : config_(config),
      replica_id_(config.replica_id.empty() ? defaultReplicaId() : config.replica_id),
      keys_(config.key_prefix),
      metrics_(std::make_unique<StateSyncMetrics>(registry)),
      outbox_(config.max_pending_bytes, config.max_send_bytes_per_second, config.max_blocks_per_record),
      pods_(pods),
      pod_lookup_(pods),
      records_(share_records && prefix
                   ? std::make_unique<RecordChannel>(*prefix, pod_lookup_, *metrics_, malformed_warnings_)
                   : nullptr),
      sessions_(sessions ? std::make_unique<SessionChannel>(*sessions, pod_lookup_, *metrics_, malformed_warnings_)
                         : nullptr),
      responses_(responses && responses->maxEntries() > 0
                     ? std::make_unique<ResponseChannel>(*responses, pod_lookup_, *metrics_, malformed_warnings_)
                     : nullptr),
      loads_(config_, keys_, replica_id_, pods, pod_lookup_, *metrics_),
      flows_(flow_service ? std::make_unique<FlowChannel>(config_, keys_, replica_id_, *flow_service, *metrics_,
                                                          malformed_warnings_)
                          : nullptr),
      snapshots_(config_, snapshotExpiry(record_expiry), keys_, records_.get(), sessions_.get(), *metrics_,
                 responses_.get()) {
  std::string error;
  parseRedisUrl(config.redis, address_, error);  // validated with the config
  const RespParser::Limits limits = replyLimits(config, sessions, responses_.get());
  writer_ = std::make_unique<RedisConnection>(io_, address_, milliseconds(config.timeout_ms), limits);
  reader_ = std::make_unique<RedisConnection>(io_, address_, milliseconds(config.timeout_ms), limits);
}

StateSync::~StateSync() { stop(); }

void StateSync::start() {
  log::info("state sync: replica {} shares {}{}{}{}in-flight counts through redis {}:{} (keys {}:*)", replica_id_,
            records_ ? "prefix records, " : "", sessions_ ? "session pins, " : "",
            responses_ ? "response ids, " : "",
            flows_ ? "flow control's service per tenant, " : "", address_.host, address_.port,
            config_.key_prefix);
  asio::co_spawn(io_, writerLoop(), asio::detached);
  asio::co_spawn(io_, staleLoadWatch(), asio::detached);
  if (records_ || sessions_ || responses_) asio::co_spawn(io_, readerLoop(), asio::detached);
  thread_ = std::thread([this] { io_.run(); });
}

void StateSync::stop() {
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

void StateSync::recordWritten(std::string_view model, std::span<const BlockHash> hashes,
                              const discovery::PodState& pod) {
  if (!records_) return;
  switch (outbox_.add(wallNowMs(), routing::steadyNowMs(), model, pod.spec().address, hashes)) {
    case Outbox::Added::kQueued: break;
    case Outbox::Added::kOverRate: metrics_->over_rate.Increment(); break;
    case Outbox::Added::kFull: metrics_->pending_full.Increment(); break;
  }
}

void StateSync::recordWithdrawn(std::string_view model, std::span<const BlockHash> hashes, size_t keep,
                                const discovery::PodState& pod) {
  if (!records_) return;
  switch (outbox_.addWithdrawal(wallNowMs(), routing::steadyNowMs(), model, pod.spec().address, hashes, keep)) {
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

void StateSync::responseRemembered(std::string_view id, std::string_view pod) { queueResponse(id, pod, true); }

void StateSync::responseForgotten(std::string_view id, std::string_view pod) { queueResponse(id, pod, false); }

void StateSync::queueResponse(std::string_view id, std::string_view pod, bool remembered) {
  if (!responses_) return;
  // Other replicas name pods by address (their names may be the same, their PodIds are not).
  const discovery::PodPtr state = pods_.snapshot()->find(pod);
  if (!state) return;  // the pod left meanwhile: nobody could route the id to it
  const ResponseEntry entry{wallNowMs(), remembered, id, state->spec().address};
  switch (outbox_.addResponse(routing::steadyNowMs(), entry)) {
    case Outbox::Added::kQueued: break;
    case Outbox::Added::kOverRate: metrics_->responses_over_rate.Increment(); break;
    case Outbox::Added::kFull: metrics_->responses_pending_full.Increment(); break;
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

// ---- writing: the stream entry, the heartbeat and the loads, the snapshots' update ----

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
    const bool do_send = !batch.empty();
    if (do_send) {
      // The snapshots learn the batch's records and pins (newest time per member) at their next update.
      snapshots_.learn(batch);
      appendStreamEntry(commands, batch);
      ++count;
    }
    const bool do_load = now >= next_load;
    if (do_load) {
      loads_.appendPublish(commands);
      count += LoadChannel::kPublishCommands;
      if (flows_) {
        flows_->appendPublish(commands);
        count += FlowChannel::kPublishCommands;
      }
    }
    const bool do_snapshot = now >= next_snapshot && snapshots_.hasPending();
    if (do_snapshot) count += snapshots_.appendUpdate(commands, wall);
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
        metrics_->pending_full.Increment(static_cast<double>(dropped.records + dropped.withdrawals));
        metrics_->sessions_pending_full.Increment(static_cast<double>(dropped.sessions));
        metrics_->responses_pending_full.Increment(static_cast<double>(dropped.responses));
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
        metrics_->withdrawals_sent.Increment(static_cast<double>(batch.withdrawal_count));
        metrics_->responses_sent.Increment(static_cast<double>(batch.response_count));
      }
      ++at;
    }
    if (do_load) {
      next_load = now + config_.load_interval_ms;
      co_await exchangeLoads(*writer_, result.replies[at + LoadChannel::kPublishCommands - 1]);
      at += LoadChannel::kPublishCommands + (flows_ ? FlowChannel::kPublishCommands : 0);
    }
    if (do_snapshot) {
      snapshots_.clearPending();
      next_snapshot = now + config_.snapshot_interval_ms;
    }
  }
}

void StateSync::appendStreamEntry(std::string& commands, const Outbox::Taken& batch) const {
  const std::string max_entries = std::to_string(config::StateSyncConfig::kStreamMaxEntries);
  std::vector<std::string_view> xadd = {"XADD", keys_.records, "MAXLEN", "~", max_entries, "*", "r", replica_id_};
  std::string batch_bytes, session_bytes, withdrawal_bytes, response_bytes;
  if (batch.count > 0) {
    batch_bytes = makeBatch(batch.records, batch.count);
    xadd.insert(xadd.end(), {"d", batch_bytes});
  }
  if (batch.session_count > 0) {
    session_bytes = makeSessionBatch(batch.sessions, batch.session_count);
    xadd.insert(xadd.end(), {"s", session_bytes});
  }
  if (batch.withdrawal_count > 0) {
    withdrawal_bytes = makeWithdrawalBatch(batch.withdrawals, batch.withdrawal_count);
    xadd.insert(xadd.end(), {"w", withdrawal_bytes});
  }
  if (batch.response_count > 0) {
    response_bytes = makeResponseBatch(batch.responses, batch.response_count);
    xadd.insert(xadd.end(), {"a", response_bytes});
  }
  appendCommand(commands, xadd);
}

// `members`: SMEMBERS's reply to the heartbeat just sent on `conn`.
asio::awaitable<void> StateSync::exchangeLoads(RedisConnection& conn, const RedisReply& members) {
  const std::vector<std::string> others = loads_.others(members);
  // The flow service of the same replicas is read in the same round trip (flow control on).
  const std::vector<std::string> flow_readable = flows_ ? FlowChannel::readable(others) : std::vector<std::string>{};
  LoadChannel::Read read;
  if (!others.empty()) {
    std::string commands;
    loads_.appendRead(commands, others);
    if (flows_) flows_->appendRead(commands, flow_readable);
    RedisConnection::Result result = co_await conn.run(std::move(commands), flows_ ? 2 : 1);
    if (!result.ok() || result.replies[0].isError()) {
      metrics_->errors_total.Increment();
      co_return;
    }
    metrics_->bytes_sent.Increment(static_cast<double>(result.bytes_sent));
    metrics_->bytes_received.Increment(static_cast<double>(result.bytes_received));
    read = loads_.decode(others, result.replies[0]);
    if (flows_) {
      if (result.replies[1].isError()) metrics_->errors_total.Increment();
      else flows_->apply(flow_readable, result.replies[1]);
    }
    if (!read.gone.empty()) {
      std::string cleanup;
      loads_.appendForget(cleanup, read.gone);
      co_await conn.run(std::move(cleanup), 1);
    }
  } else if (flows_) {
    flows_->apply({}, RedisReply{});  // nobody else: forget what the others served
  }
  loads_.apply(std::move(read), routing::steadyNowMs());
}

asio::awaitable<void> StateSync::staleLoadWatch() {
  for (;;) {
    co_await pause(milliseconds(config_.load_interval_ms));
    loads_.expireIfStale(routing::steadyNowMs());
  }
}

// ---- reading: the snapshots, then the stream ----

asio::awaitable<void> StateSync::readerLoop() {
  const milliseconds backoff_max(config_.reconnect_max_ms);
  milliseconds backoff(50);
  uint64_t connects_seen = 0;
  bool need_snapshot = true;
  bool check_trim = false;
  for (;;) {
    bool ok = true;
    if (need_snapshot) {
      ok = co_await loadSnapshot(*reader_);
      if (ok) need_snapshot = check_trim = false;
    } else if (check_trim) {
      bool lost = false;
      ok = co_await streamLostEntries(*reader_, lost);
      if (ok) {
        check_trim = false;
        if (lost) {
          log::info("state sync: the stream lost entries after {} while away; loading the snapshot",
                    stream_position_);
          need_snapshot = true;
        }
      }
    } else {
      ok = co_await readStream(*reader_);
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
  const size_t count = snapshots_.appendRead(commands, wall);
  RedisConnection::Result result = co_await conn.run(std::move(commands), count);
  if (!result.ok()) co_return false;
  metrics_->bytes_received.Increment(static_cast<double>(result.bytes_received));
  for (const RedisReply& reply : result.replies)
    if (reply.isError()) {
      metrics_->errors_total.Increment();
      warnRedisError("loading the snapshot", reply.str);
    }
  const SnapshotChannel::Loaded loaded = snapshots_.apply(result.replies, wall);
  stream_position_ = snapshots_.streamPositionAfter(wall);
  metrics_->snapshot_loads_total.Increment();
  log::info("state sync: loaded a snapshot of {} records, {} session pins and {} response ids; reading the stream "
            "from {}",
            loaded.records, loaded.pins, loaded.responses, stream_position_);
  co_return true;
}

// After an outage: whether the stream lost entries past our position (trimmed, or Redis restarted and the stream
// was rebuilt), which the snapshot then has. False when Redis did not answer.
asio::awaitable<bool> StateSync::streamLostEntries(RedisConnection& conn, bool& lost) {
  std::string commands;
  appendCommand(commands, {"XINFO", "STREAM", keys_.records});
  RedisConnection::Result result = co_await conn.run(std::move(commands), 1);
  if (!result.ok()) co_return false;
  const RedisReply& info = result.replies[0];
  // Redis 7 keeps the highest id it ever trimmed or deleted from the stream.
  const RedisReply* deleted = info.isError() ? nullptr : field(info, "max-deleted-entry-id");
  lost = deleted && streamId(deleted->str) > streamId(stream_position_);
  co_return true;
}

// One read of the stream past our position, waiting up to a second for entries. False when Redis did not answer.
asio::awaitable<bool> StateSync::readStream(RedisConnection& conn) {
  constexpr milliseconds kBlock(1000);
  std::string commands;
  appendCommand(commands, {"XREAD", "COUNT", "256", "BLOCK", std::to_string(kBlock.count()), "STREAMS", keys_.records,
                           stream_position_});
  RedisConnection::Result result = co_await conn.run(std::move(commands), 1, kBlock);
  if (!result.ok()) co_return false;
  metrics_->bytes_received.Increment(static_cast<double>(result.bytes_received));
  const RedisReply& reply = result.replies[0];
  if (reply.isError()) {
    metrics_->errors_total.Increment();
    warnRedisError("XREAD", reply.str);
    co_await pause(milliseconds(config_.reconnect_max_ms));
  }
  applyStreamEntries(reply, wallNowMs());
  std::lock_guard lock(view_mutex_);
  position_view_ = stream_position_;
  co_return true;
}

void StateSync::applyStreamEntries(const RedisReply& reply, int64_t now_wall_ms) {
  for (const RedisReply& stream : reply.elements) {
    if (stream.elements.size() < 2) continue;
    for (const RedisReply& entry : stream.elements[1].elements) {
      if (entry.elements.size() < 2) continue;
      stream_position_ = entry.elements[0].str;
      const RedisReply& fields = entry.elements[1];
      const RedisReply* from = field(fields, "r");
      if (!from || from->str == replica_id_) continue;
      const RedisReply* data = field(fields, "d");
      if (data && records_) records_->applyBatch(data->str, now_wall_ms);
      // After the entry's records: a record and its withdrawal may travel in one entry.
      const RedisReply* withdrawn = field(fields, "w");
      if (withdrawn && records_) records_->applyWithdrawals(withdrawn->str);
      const RedisReply* pins = field(fields, "s");
      if (pins && sessions_) sessions_->applyBatch(pins->str, now_wall_ms);
      const RedisReply* responses = field(fields, "a");
      if (responses && responses_) responses_->applyBatch(responses->str, now_wall_ms);
    }
  }
}

// ---- the rest ----

void StateSync::warnRedisError(std::string_view what, std::string_view error) {
  // Error text comes from the server (or whatever answers as one): at most a line of it, at most once a second.
  constexpr size_t kMaxShown = 200;
  if (uint64_t more = 0; redis_error_warnings_.allow(more))
    log::warn("state sync: {}: {}{} ({} more since the last such line)", what, error.substr(0, kMaxShown),
              error.size() > kMaxShown ? "..." : "", more);
}

std::vector<std::pair<std::string, int32_t>> StateSync::replicaLoads(std::string_view address) const {
  return loads_.replicaLoads(address);
}

StateSync::Status StateSync::status() const {
  Status s;
  s.replica_id = replica_id_;
  s.connected = connected_.load(std::memory_order_relaxed);
  s.shares_records = records_ != nullptr;
  s.replicas = loads_.liveReplicas();
  std::lock_guard lock(view_mutex_);
  s.stream_position = position_view_;
  return s;
}

}  // namespace prefixgate::sync
