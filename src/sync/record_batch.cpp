#include "sync/record_batch.h"

#include <algorithm>
#include <cstring>

#include "openai/responses_request.h"
#include "routing/session_table.h"

namespace prefixgate::sync {
namespace {

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

bool getVarint(std::string_view& in, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in.empty()) return false;
    const auto byte = static_cast<uint8_t>(in.front());
    in.remove_prefix(1);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return true;
  }
  return false;  // more than ten bytes: not a varint we write
}

void putString(std::string& out, std::string_view s) {
  putVarint(out, s.size());
  out.append(s);
}

bool getString(std::string_view& in, std::string_view& s) {
  uint64_t n = 0;
  if (!getVarint(in, n) || n > in.size()) return false;
  s = in.substr(0, n);
  in.remove_prefix(n);
  return true;
}

void putKey(std::string& out, std::string_view model, std::string_view pod, std::span<const BlockHash> hashes) {
  putString(out, model);
  putString(out, pod);
  putVarint(out, hashes.size());
  const size_t at = out.size();
  out.resize(at + hashes.size() * 8);
  for (size_t i = 0; i < hashes.size(); ++i) {
    uint64_t v = hashes[i].value;
    for (int b = 0; b < 8; ++b) out[at + i * 8 + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  }
}

bool getKey(std::string_view& in, Record& out, std::string& error) {
  uint64_t blocks = 0;
  if (!getString(in, out.model) || !getString(in, out.pod) || !getVarint(in, blocks)) {
    error = "truncated record";
    return false;
  }
  if (blocks > in.size() / 8) {
    error = "record claims " + std::to_string(blocks) + " blocks, more than the bytes left";
    return false;
  }
  out.hashes.resize(blocks);
  for (size_t i = 0; i < blocks; ++i) {
    uint64_t v = 0;
    for (int b = 0; b < 8; ++b) v |= static_cast<uint64_t>(static_cast<uint8_t>(in[i * 8 + b])) << (8 * b);
    out.hashes[i] = BlockHash{v};
  }
  in.remove_prefix(blocks * 8);
  return true;
}

std::string batchHeader(char kind, uint8_t version, size_t count) {
  std::string out = {'P', kind, static_cast<char>(version)};
  putVarint(out, count);
  return out;
}

bool getSessionKey(std::string_view& in, SessionPin& out, std::string& error) {
  if (!getString(in, out.id) || !getString(in, out.pod)) {
    error = "truncated session pin";
    return false;
  }
  if (out.id.size() > routing::SessionTable::kMaxIdBytes) {
    error = "session id of " + std::to_string(out.id.size()) + " bytes (at most " +
            std::to_string(routing::SessionTable::kMaxIdBytes) + ")";
    return false;
  }
  return true;
}

bool getResponseKey(std::string_view& in, ResponseEntry& out, std::string& error) {
  if (!getString(in, out.id) || !getString(in, out.pod)) {
    error = "truncated response entry";
    return false;
  }
  if (!openai::validResponseId(out.id)) {
    error = "a response id of " + std::to_string(out.id.size()) + " bytes that is not one (1 to " +
            std::to_string(openai::kMaxResponseIdBytes) + " of A-Z a-z 0-9 _ . -)";
    return false;
  }
  if (out.pod.empty() || out.pod.size() > kMaxPodAddressBytes) {
    error = "a response's pod address of " + std::to_string(out.pod.size()) + " bytes (1 to " +
            std::to_string(kMaxPodAddressBytes) + ")";
    return false;
  }
  return true;
}

// What tells one kind of batch from another, and how one entry is read.
template <class Entry>
struct BatchKind;
template <>
struct BatchKind<Record> {
  static constexpr char kKind = 'G';
  static constexpr uint8_t kVersion = kRecordBatchVersion;
  static constexpr const char* kWhat = "record";
  static bool read(std::string_view& in, Record& out, std::string& error) { return readRecord(in, out, error); }
};
template <>
struct BatchKind<SessionPin> {
  static constexpr char kKind = 'S';
  static constexpr uint8_t kVersion = kSessionBatchVersion;
  static constexpr const char* kWhat = "session";
  static bool read(std::string_view& in, SessionPin& out, std::string& error) { return readSession(in, out, error); }
};

template <>
struct BatchKind<Withdrawal> {
  static constexpr char kKind = 'W';
  static constexpr uint8_t kVersion = kWithdrawalBatchVersion;
  static constexpr const char* kWhat = "withdrawal";
  static bool read(std::string_view& in, Withdrawal& out, std::string& error) {
    return readWithdrawal(in, out, error);
  }
};

template <>
struct BatchKind<ResponseEntry> {
  static constexpr char kKind = 'R';
  static constexpr uint8_t kVersion = kResponseBatchVersion;
  static constexpr const char* kWhat = "response";
  static bool read(std::string_view& in, ResponseEntry& out, std::string& error) {
    return readResponse(in, out, error);
  }
};

}  // namespace

void appendRecord(std::string& out, int64_t wall_ms, std::string_view model, std::string_view pod,
                  std::span<const BlockHash> hashes) {
  putVarint(out, static_cast<uint64_t>(wall_ms < 0 ? 0 : wall_ms));
  putKey(out, model, pod, hashes);
}

std::string makeBatch(std::string_view records, size_t count) {
  return batchHeader(BatchKind<Record>::kKind, kRecordBatchVersion, count).append(records);
}

void appendSession(std::string& out, const SessionPin& pin) {
  const int64_t wall = std::max<int64_t>(pin.wall_ms, 0);
  putVarint(out, static_cast<uint64_t>(wall));
  putVarint(out, static_cast<uint64_t>(std::clamp<int64_t>(wall - pin.pinned_ms, 0, wall)));
  putString(out, pin.id);
  putString(out, pin.pod);
}

std::string makeSessionBatch(std::string_view sessions, size_t count) {
  return batchHeader(BatchKind<SessionPin>::kKind, kSessionBatchVersion, count).append(sessions);
}

void appendWithdrawal(std::string& out, int64_t wall_ms, uint64_t keep, std::string_view model, std::string_view pod,
                      std::span<const BlockHash> hashes) {
  putVarint(out, static_cast<uint64_t>(wall_ms < 0 ? 0 : wall_ms));
  putVarint(out, std::min<uint64_t>(keep, hashes.size()));
  putKey(out, model, pod, hashes);
}

std::string makeWithdrawalBatch(std::string_view withdrawals, size_t count) {
  return batchHeader(BatchKind<Withdrawal>::kKind, kWithdrawalBatchVersion, count).append(withdrawals);
}

void appendResponse(std::string& out, const ResponseEntry& entry) {
  putVarint(out, static_cast<uint64_t>(std::max<int64_t>(entry.wall_ms, 0)));
  out.push_back(entry.remembered ? '\x01' : '\x00');
  putString(out, entry.id);
  putString(out, entry.pod);
}

std::string makeResponseBatch(std::string_view responses, size_t count) {
  return batchHeader(BatchKind<ResponseEntry>::kKind, kResponseBatchVersion, count).append(responses);
}

bool readResponse(std::string_view& in, ResponseEntry& out, std::string& error) {
  uint64_t ms = 0;
  if (!getVarint(in, ms) || ms > static_cast<uint64_t>(INT64_MAX) || in.empty()) {
    error = "truncated response entry time";
    return false;
  }
  const auto op = static_cast<uint8_t>(in.front());
  if (op > 1) {
    error = "response entry op " + std::to_string(op) + " (0 or 1)";
    return false;
  }
  in.remove_prefix(1);
  out.wall_ms = static_cast<int64_t>(ms);
  out.remembered = op == 1;
  return getResponseKey(in, out, error);
}

bool readRecord(std::string_view& in, Record& out, std::string& error) {
  uint64_t ms = 0;
  if (!getVarint(in, ms) || ms > static_cast<uint64_t>(INT64_MAX)) {
    error = "truncated record time";
    return false;
  }
  out.wall_ms = static_cast<int64_t>(ms);
  return getKey(in, out, error);
}

bool readSession(std::string_view& in, SessionPin& out, std::string& error) {
  uint64_t ms = 0, pinned_for = 0;
  if (!getVarint(in, ms) || ms > static_cast<uint64_t>(INT64_MAX) || !getVarint(in, pinned_for)) {
    error = "truncated session pin time";
    return false;
  }
  if (pinned_for > ms) {
    error = "session pinned " + std::to_string(pinned_for) + " ms before its time";
    return false;
  }
  out.wall_ms = static_cast<int64_t>(ms);
  out.pinned_ms = static_cast<int64_t>(ms - pinned_for);
  return getSessionKey(in, out, error);
}

bool readWithdrawal(std::string_view& in, Withdrawal& out, std::string& error) {
  uint64_t ms = 0;
  if (!getVarint(in, ms) || ms > static_cast<uint64_t>(INT64_MAX) || !getVarint(in, out.keep)) {
    error = "truncated withdrawal";
    return false;
  }
  out.record.wall_ms = static_cast<int64_t>(ms);
  if (!getKey(in, out.record, error)) return false;
  if (out.keep > out.record.hashes.size()) {
    error = "withdrawal keeps " + std::to_string(out.keep) + " of its " + std::to_string(out.record.hashes.size()) +
            " blocks";
    return false;
  }
  return true;
}

template <class Entry>
BatchReaderOf<Entry>::BatchReaderOf(std::string_view batch) : in_(batch) {
  using Kind = BatchKind<Entry>;
  if (in_.size() < 3 || in_[0] != 'P' || in_[1] != Kind::kKind) {
    error_ = std::string("not a ") + Kind::kWhat + " batch";
    return;
  }
  if (static_cast<uint8_t>(in_[2]) != Kind::kVersion) {
    error_ = std::string(Kind::kWhat) + " batch version " + std::to_string(static_cast<uint8_t>(in_[2])) +
             " (this gateway reads " + std::to_string(Kind::kVersion) + ")";
    return;
  }
  in_.remove_prefix(3);
  if (!getVarint(in_, left_)) error_ = "truncated batch header";
}

template <class Entry>
bool BatchReaderOf<Entry>::next(Entry& out) {
  if (!error_.empty()) return false;
  if (left_ == 0) {
    if (!in_.empty()) error_ = std::to_string(in_.size()) + " bytes after the batch's last " + BatchKind<Entry>::kWhat;
    return false;
  }
  if (!BatchKind<Entry>::read(in_, out, error_)) return false;
  --left_;
  return true;
}

template class BatchReaderOf<Record>;
template class BatchReaderOf<SessionPin>;
template class BatchReaderOf<Withdrawal>;
template class BatchReaderOf<ResponseEntry>;

std::string encodeKey(std::string_view model, std::string_view pod, std::span<const BlockHash> hashes) {
  std::string out;
  out.reserve(model.size() + pod.size() + hashes.size() * 8 + 8);
  putKey(out, model, pod, hashes);
  return out;
}

bool decodeKey(std::string_view key, Record& out, std::string& error) {
  if (!getKey(key, out, error)) return false;
  if (!key.empty()) {
    error = std::to_string(key.size()) + " bytes after the record";
    return false;
  }
  return true;
}

std::string encodeSessionKey(const SessionPin& pin) {
  std::string out;
  putString(out, pin.id);
  putString(out, pin.pod);
  putVarint(out, static_cast<uint64_t>(std::max<int64_t>(pin.pinned_ms, 0)));
  return out;
}

bool decodeSessionKey(std::string_view key, SessionPin& out, std::string& error) {
  uint64_t pinned = 0;
  if (!getSessionKey(key, out, error)) return false;
  if (!getVarint(key, pinned) || pinned > static_cast<uint64_t>(INT64_MAX)) {
    error = "truncated session pin time";
    return false;
  }
  if (!key.empty()) {
    error = std::to_string(key.size()) + " bytes after the session pin";
    return false;
  }
  out.pinned_ms = static_cast<int64_t>(pinned);
  return true;
}

std::string encodeResponseKey(const ResponseEntry& entry) {
  std::string out;
  putString(out, entry.id);
  putString(out, entry.pod);
  return out;
}

bool decodeResponseKey(std::string_view key, ResponseEntry& out, std::string& error) {
  if (!getResponseKey(key, out, error)) return false;
  if (!key.empty()) {
    error = std::to_string(key.size()) + " bytes after the response entry";
    return false;
  }
  out.remembered = true;
  return true;
}

}  // namespace prefixgate::sync
