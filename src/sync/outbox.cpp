#include "sync/outbox.h"

#include <algorithm>

namespace prefixgate::sync {

Outbox::Outbox(uint64_t max_pending_bytes, uint64_t bytes_per_second, uint32_t max_blocks_per_record)
    : max_pending_bytes_(max_pending_bytes),
      bytes_per_second_(bytes_per_second),
      max_blocks_(max_blocks_per_record),
      tokens_(static_cast<double>(bytes_per_second)) {}

Outbox::Added Outbox::admit(std::string& queue, size_t before, size_t& count, int64_t steady_ms) {
  if (steady_ms > refilled_ms_) {
    tokens_ = std::min(static_cast<double>(bytes_per_second_),
                       tokens_ + static_cast<double>(bytes_per_second_) * static_cast<double>(steady_ms - refilled_ms_) / 1000.0);
    refilled_ms_ = steady_ms;
  }
  const auto size = static_cast<double>(queue.size() - before);
  const Added verdict = tokens_ < size ? Added::kOverRate
                        : pending_.bytes() > max_pending_bytes_ ? Added::kFull
                                                                                                   : Added::kQueued;
  if (verdict != Added::kQueued) {
    queue.resize(before);
    return verdict;
  }
  tokens_ -= size;
  ++count;
  return Added::kQueued;
}

Outbox::Added Outbox::add(int64_t wall_ms, int64_t steady_ms, std::string_view model, std::string_view pod,
                          std::span<const BlockHash> hashes) {
  hashes = hashes.first(std::min<size_t>(hashes.size(), max_blocks_));
  std::lock_guard lock(mutex_);
  const size_t before = pending_.records.size();
  appendRecord(pending_.records, wall_ms, model, pod, hashes);
  return admit(pending_.records, before, pending_.count, steady_ms);
}

Outbox::Added Outbox::addSession(int64_t steady_ms, const SessionPin& pin) {
  std::lock_guard lock(mutex_);
  const size_t before = pending_.sessions.size();
  appendSession(pending_.sessions, pin);
  return admit(pending_.sessions, before, pending_.session_count, steady_ms);
}

Outbox::Added Outbox::addWithdrawal(int64_t wall_ms, int64_t steady_ms, std::string_view model, std::string_view pod,
                                    std::span<const BlockHash> hashes, uint64_t keep) {
  hashes = hashes.first(std::min<size_t>(hashes.size(), max_blocks_));
  std::lock_guard lock(mutex_);
  const size_t before = pending_.withdrawals.size();
  appendWithdrawal(pending_.withdrawals, wall_ms, keep, model, pod, hashes);
  return admit(pending_.withdrawals, before, pending_.withdrawal_count, steady_ms);
}

Outbox::Added Outbox::addResponse(int64_t steady_ms, const ResponseEntry& entry) {
  std::lock_guard lock(mutex_);
  const size_t before = pending_.responses.size();
  appendResponse(pending_.responses, entry);
  return admit(pending_.responses, before, pending_.response_count, steady_ms);
}

Outbox::Taken Outbox::take() {
  std::lock_guard lock(mutex_);
  Taken out = std::move(pending_);
  pending_ = {};
  return out;
}

namespace {
// The leading entries of `taken` (read one by one with `read`) that fit in `room` bytes; returns how many.
template <class Entry, class Read>
size_t keepFitting(std::string_view taken, size_t room, std::string& kept, Read read) {
  size_t n = 0;
  Entry e;
  std::string error;
  while (!taken.empty()) {
    const std::string_view before = taken;
    if (!read(taken, e, error)) break;
    const size_t size = before.size() - taken.size();
    if (kept.size() + size > room) break;
    kept.append(before.substr(0, size));
    ++n;
  }
  return n;
}
}  // namespace

Outbox::Dropped Outbox::putBack(Taken taken) {
  std::lock_guard lock(mutex_);
  // Keep the older entries first, one by one, while they fit beside what was queued since.
  const size_t queued = pending_.bytes();
  size_t room = max_pending_bytes_ > queued ? max_pending_bytes_ - queued : 0;
  std::string records, sessions, withdrawals, responses;
  const size_t kept = keepFitting<Record>(taken.records, room, records, readRecord);
  room -= records.size();
  const size_t kept_sessions = keepFitting<SessionPin>(taken.sessions, room, sessions, readSession);
  room -= sessions.size();
  const size_t kept_withdrawals = keepFitting<Withdrawal>(taken.withdrawals, room, withdrawals, readWithdrawal);
  room -= withdrawals.size();
  const size_t kept_responses = keepFitting<ResponseEntry>(taken.responses, room, responses, readResponse);
  pending_.records.insert(0, records);
  pending_.count += kept;
  pending_.sessions.insert(0, sessions);
  pending_.session_count += kept_sessions;
  pending_.withdrawals.insert(0, withdrawals);
  pending_.withdrawal_count += kept_withdrawals;
  pending_.responses.insert(0, responses);
  pending_.response_count += kept_responses;
  return {taken.count - kept, taken.session_count - kept_sessions, taken.withdrawal_count - kept_withdrawals,
          taken.response_count - kept_responses};
}

size_t Outbox::pendingBytes() const {
  std::lock_guard lock(mutex_);
  return pending_.bytes();
}

}  // namespace prefixgate::sync
