#include "sync/snapshot_channel.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <vector>

namespace prefixgate::sync {
namespace {

// A sorted set's score (integer milliseconds, as written here); 0 when malformed or negative (a time before 1970
// would only make the age arithmetic meet INT64_MIN).
int64_t scoreMs(std::string_view score) {
  int64_t ms = 0;
  std::from_chars(score.data(), score.data() + score.size(), ms);
  return std::max<int64_t>(ms, 0);
}

}  // namespace

SnapshotChannel::SnapshotChannel(const config::StateSyncConfig& config, std::chrono::milliseconds record_expiry,
                                 const SyncKeys& keys, RecordChannel* records, SessionChannel* sessions,
                                 StateSyncMetrics& metrics, ResponseChannel* responses)
    : config_(config),
      expiry_(record_expiry),
      keys_(keys),
      records_(records),
      sessions_(sessions),
      metrics_(metrics),
      responses_(responses) {}

void SnapshotChannel::learn(const Outbox::Taken& batch) {
  std::string_view in = batch.records;
  Record r;
  std::string error;
  while (!in.empty() && readRecord(in, r, error)) {
    if (records_pending_.size() >= config_.snapshot_max_records) break;
    std::string member = encodeKey(r.model, r.pod, r.hashes);
    withdrawn_pending_.erase(member);
    int64_t& newest = records_pending_[std::move(member)];
    newest = std::max(newest, r.wall_ms);
  }
  // A withdrawn record leaves the snapshot (a replica that loads it later must not learn it), and what the pod still
  // holds of it goes in instead.
  in = batch.withdrawals;
  Withdrawal w;
  while (!in.empty() && readWithdrawal(in, w, error)) {
    std::string member = encodeKey(w.record.model, w.record.pod, w.record.hashes);
    records_pending_.erase(member);
    if (withdrawn_pending_.size() < config_.snapshot_max_records) withdrawn_pending_.insert(std::move(member));
    if (w.keep == 0 || records_pending_.size() >= config_.snapshot_max_records) continue;
    const std::span<const BlockHash> kept = std::span<const BlockHash>(w.record.hashes).first(w.keep);
    int64_t& newest = records_pending_[encodeKey(w.record.model, w.record.pod, kept)];
    newest = std::max(newest, w.record.wall_ms);
  }
  in = batch.sessions;
  SessionPin pin;
  while (sessions_ && !in.empty() && readSession(in, pin, error)) {
    if (sessions_pending_.size() >= sessions_->settings().max_sessions) break;
    int64_t& newest = sessions_pending_[encodeSessionKey(pin)];
    newest = std::max(newest, pin.wall_ms);
  }
  // A deleted response's member leaves the snapshot (a replica that loads it later must not route its id).
  in = batch.responses;
  ResponseEntry entry;
  while (responses_ && !in.empty() && readResponse(in, entry, error)) {
    std::string member = encodeResponseKey(entry);
    if (!entry.remembered) {
      responses_pending_.erase(member);
      if (forgotten_pending_.size() < responses_->maxEntries()) forgotten_pending_.insert(std::move(member));
      continue;
    }
    if (responses_pending_.size() >= responses_->maxEntries()) continue;
    forgotten_pending_.erase(member);
    int64_t& newest = responses_pending_[std::move(member)];
    newest = std::max(newest, entry.wall_ms);
  }
}

size_t SnapshotChannel::appendUpdate(std::string& commands, int64_t wall_ms) const {
  size_t count =
      appendAdd(commands, keys_.snapshot, records_pending_, wall_ms, expiry_.count(), config_.snapshot_max_records);
  if (!withdrawn_pending_.empty()) {
    std::vector<std::string_view> args = {"ZREM", keys_.snapshot};
    args.insert(args.end(), withdrawn_pending_.begin(), withdrawn_pending_.end());
    appendCommand(commands, args);
    ++count;
  }
  if (sessions_)
    count += appendAdd(commands, keys_.sessions, sessions_pending_, wall_ms, sessions_->settings().ttl_ms,
                       sessions_->settings().max_sessions);
  if (responses_) {
    count += appendAdd(commands, keys_.responses, responses_pending_, wall_ms, responses_->ttlMs(),
                       responses_->maxEntries());
    if (!forgotten_pending_.empty()) {
      std::vector<std::string_view> args = {"ZREM", keys_.responses};
      args.insert(args.end(), forgotten_pending_.begin(), forgotten_pending_.end());
      appendCommand(commands, args);
      ++count;
    }
  }
  return count;
}

// ZADD of `pending`, then the trims: members older than `max_age_ms`, then all but the newest `max_members`.
size_t SnapshotChannel::appendAdd(std::string& commands, const std::string& key, const Pending& pending,
                                  int64_t wall_ms, int64_t max_age_ms, uint64_t max_members) {
  if (pending.empty()) return 0;
  std::vector<std::string> scores;
  scores.reserve(pending.size());
  for (const auto& [member, ms] : pending) scores.push_back(std::to_string(ms));
  std::vector<std::string_view> args = {"ZADD", key};
  size_t i = 0;
  for (const auto& [member, ms] : pending) {
    args.push_back(scores[i++]);
    args.push_back(member);
  }
  appendCommand(commands, args);
  const std::string oldest = "(" + std::to_string(wall_ms - max_age_ms);
  appendCommand(commands, {"ZREMRANGEBYSCORE", key, "-inf", oldest});
  const std::string keep = "-" + std::to_string(max_members + 1);
  appendCommand(commands, {"ZREMRANGEBYRANK", key, "0", keep});
  return 3;
}

void SnapshotChannel::clearPending() {
  records_pending_.clear();
  withdrawn_pending_.clear();
  sessions_pending_.clear();
  responses_pending_.clear();
  forgotten_pending_.clear();
}

size_t SnapshotChannel::appendRead(std::string& commands, int64_t wall_ms) const {
  size_t count = 0;
  if (records_) {
    appendCommand(commands, {"ZREVRANGEBYSCORE", keys_.snapshot, "+inf",
                             "(" + std::to_string(wall_ms - expiry_.count()), "WITHSCORES", "LIMIT", "0",
                             std::to_string(config_.snapshot_max_records)});
    ++count;
  }
  if (sessions_) {
    appendCommand(commands, {"ZREVRANGEBYSCORE", keys_.sessions, "+inf",
                             "(" + std::to_string(wall_ms - sessions_->settings().ttl_ms), "WITHSCORES", "LIMIT", "0",
                             std::to_string(sessions_->settings().max_sessions)});
    ++count;
  }
  if (responses_) {
    appendCommand(commands, {"ZREVRANGEBYSCORE", keys_.responses, "+inf",
                             "(" + std::to_string(wall_ms - responses_->ttlMs()), "WITHSCORES", "LIMIT", "0",
                             std::to_string(responses_->maxEntries())});
    ++count;
  }
  return count;
}

SnapshotChannel::Loaded SnapshotChannel::apply(std::span<const RedisReply> replies, int64_t wall_ms) {
  // `i` steps over (member, score) pairs from the last.
  Loaded loaded;
  size_t at = 0;
  std::string error;
  if (records_) {
    const RedisReply& reply = replies[at++];
    Record r;
    for (size_t i = reply.elements.size() & ~size_t{1}; i >= 2;) {
      i -= 2;
      if (!decodeKey(reply.elements[i].str, r, error)) {
        metrics_.malformed.Increment();
        continue;
      }
      r.wall_ms = scoreMs(reply.elements[i + 1].str);
      records_->apply(r, wall_ms, true);
      ++loaded.records;
    }
  }
  if (sessions_) {
    const RedisReply& reply = replies[at++];
    SessionPin pin;
    for (size_t i = reply.elements.size() & ~size_t{1}; i >= 2;) {
      i -= 2;
      if (!decodeSessionKey(reply.elements[i].str, pin, error)) {
        metrics_.sessions_malformed.Increment();
        continue;
      }
      pin.wall_ms = scoreMs(reply.elements[i + 1].str);
      sessions_->apply(pin, wall_ms);
      ++loaded.pins;
    }
  }
  if (responses_) {
    const RedisReply& reply = replies[at++];
    ResponseEntry entry;
    for (size_t i = reply.elements.size() & ~size_t{1}; i >= 2;) {
      i -= 2;
      if (!decodeResponseKey(reply.elements[i].str, entry, error)) {
        responses_->malformed("a member of the responses snapshot", error);
        continue;
      }
      entry.wall_ms = scoreMs(reply.elements[i + 1].str);
      responses_->apply(entry, wall_ms);
      ++loaded.responses;
    }
  }
  return loaded;
}

std::string SnapshotChannel::streamPositionAfter(int64_t wall_ms) const {
  const int64_t behind = 2 * static_cast<int64_t>(config_.snapshot_interval_ms) + 1000;
  return std::to_string(std::max<int64_t>(0, wall_ms - behind)) + "-0";
}

}  // namespace prefixgate::sync
