#pragma once
// The wire form of prefix records shared between replicas (docs/state-sync.md). A record says "pod P of model M
// was routed the prompt whose chained block hashes are H, at wall-clock time T". Pods are named by their address
// (host:port), which every replica's discovery gives the same; PodIds are per process.
//   batch  := "PG" version:u8 count:varint record*        (one stream entry)
//   record := wall_ms:varint key
//   key    := model:str pod:str blocks:varint hash:u64le*  (a snapshot member: the record without its time)
//   str    := length:varint bytes
// Pure functions, no allocation beyond the output; decoding bounds every length by the bytes left.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::sync {

inline constexpr uint8_t kRecordBatchVersion = 1;
struct Record {
  int64_t wall_ms = 0;
  std::string_view model;  // views into the decoded bytes
  std::string_view pod;
  std::vector<BlockHash> hashes;
};

// Appends one record (its time and key) to `out`: the body of a batch, without the batch's header.
void appendRecord(std::string& out, int64_t wall_ms, std::string_view model, std::string_view pod,
                  std::span<const BlockHash> hashes);
// A batch: the header for `count` records followed by `records` (appendRecord's output).
std::string makeBatch(std::string_view records, size_t count);

// Reads a batch record by record. Any malformed byte (a length past the end, a bad header or version, a count that
// does not match) ends the reading with error() set; records already returned stay valid.
class BatchReader {
 public:
  explicit BatchReader(std::string_view batch);
  // The next record into `out` (views into the batch); false at the end or on error.
  bool next(Record& out);
  const std::string& error() const { return error_; }

 private:
  std::string_view in_;
  uint64_t left_ = 0;
  std::string error_;
};

// A record's key (see above) and its inverse; `decodeKey` also fails on trailing bytes.
std::string encodeKey(std::string_view model, std::string_view pod, std::span<const BlockHash> hashes);
bool decodeKey(std::string_view key, Record& out, std::string& error);
// Reads one record (time and key) from the front of `in`, advancing it; used by BatchReader and the outbox.
bool readRecord(std::string_view& in, Record& out, std::string& error);

}  // namespace prefixgate::sync
