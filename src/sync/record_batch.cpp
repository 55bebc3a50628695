#include "sync/record_batch.h"

#include <cstring>

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

}  // namespace

void appendRecord(std::string& out, int64_t wall_ms, std::string_view model, std::string_view pod,
                  std::span<const BlockHash> hashes) {
  putVarint(out, static_cast<uint64_t>(wall_ms < 0 ? 0 : wall_ms));
  putKey(out, model, pod, hashes);
}

std::string makeBatch(std::string_view records, size_t count) {
  std::string out = "PG";
  out.push_back(static_cast<char>(kRecordBatchVersion));
  putVarint(out, count);
  out.append(records);
  return out;
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

BatchReader::BatchReader(std::string_view batch) : in_(batch) {
  if (in_.size() < 3 || in_[0] != 'P' || in_[1] != 'G') {
    error_ = "not a record batch";
    return;
  }
  if (static_cast<uint8_t>(in_[2]) != kRecordBatchVersion) {
    error_ = "record batch version " + std::to_string(static_cast<uint8_t>(in_[2])) + " (this gateway reads " +
             std::to_string(kRecordBatchVersion) + ")";
    return;
  }
  in_.remove_prefix(3);
  if (!getVarint(in_, left_)) error_ = "truncated batch header";
}

bool BatchReader::next(Record& out) {
  if (!error_.empty()) return false;
  if (left_ == 0) {
    if (!in_.empty()) error_ = std::to_string(in_.size()) + " bytes after the batch's last record";
    return false;
  }
  if (!readRecord(in_, out, error_)) return false;
  --left_;
  return true;
}

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

}  // namespace prefixgate::sync
