#pragma once
// The wire form of what replicas share (docs/state-sync.md): prefix records, session pins and response ids.
// A record says "pod P of model M was routed the prompt whose chained block hashes are H, at wall-clock time T".
// A session pin says "session S was routed to pod P at time T; it has been pinned there since time T0".
// A response entry says "pod P produced response I at time T" (or "... I was deleted at T").
// Pods are named by their address (host:port), which every replica's discovery gives the same; PodIds are per
// process.
//   batch    := "PG" version:u8 count:varint record*       (a stream entry's field d)
//   record   := wall_ms:varint key
//   key      := model:str pod:str blocks:varint hash:u64le* (a snapshot member: the record without its time)
//   sessions := "PS" version:u8 count:varint session*      (a stream entry's field s)
//   session  := wall_ms:varint pinned_for_ms:varint id:str pod:str   (T0 = wall_ms - pinned_for_ms)
//   session key := id:str pod:str pinned_ms:varint          (a member of the sessions snapshot: the pin without its
//                                                             use time)
//   withdrawals := "PW" version:u8 count:varint withdrawal*  (a stream entry's field w)
//   withdrawal  := wall_ms:varint keep:varint key   ("pod P never computed the prompt H beyond its first `keep`
//                                                    blocks": a record taken back after its request failed there;
//                                                    H is the record as it was shared, keep <= its blocks)
//   responses := "PR" version:u8 count:varint response*    (a stream entry's field a)
//   response  := wall_ms:varint op:u8 response key          (op 1: "pod P produced response id I at time T";
//                                                             op 0: "response I, produced by P, was deleted at T")
//   response key := id:str pod:str                          (a member of the responses snapshot, scored by T)
//   str      := length:varint bytes
// Pure functions, no allocation beyond the output; decoding bounds every length by the bytes left, a session
// id by SessionTable::kMaxIdBytes, a response id by openai::validResponseId and its pod by kMaxPodAddressBytes.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::sync {

inline constexpr uint8_t kRecordBatchVersion = 1;
inline constexpr uint8_t kSessionBatchVersion = 1;
inline constexpr uint8_t kWithdrawalBatchVersion = 1;
inline constexpr uint8_t kResponseBatchVersion = 1;
// The longest pod address a response entry may carry (a DNS name is at most 253 bytes, with ":port" and brackets).
inline constexpr size_t kMaxPodAddressBytes = 300;
struct Record {
  int64_t wall_ms = 0;
  std::string_view model;  // views into the decoded bytes
  std::string_view pod;
  std::vector<BlockHash> hashes;
};

struct SessionPin {
  int64_t wall_ms = 0;    // when the session was last routed to the pod
  int64_t pinned_ms = 0;  // when it was pinned to the pod (<= wall_ms)
  std::string_view id;    // views into the decoded bytes
  std::string_view pod;
};

// A response id remembered or forgotten by a replica (Responses API chain affinity, routing/response_affinity.h).
struct ResponseEntry {
  int64_t wall_ms = 0;      // when it was produced (or deleted)
  bool remembered = true;   // false: the response was deleted
  std::string_view id;      // views into the decoded bytes
  std::string_view pod;     // by address
};

// A record taken back (see above): `record.wall_ms` is when; the pod holds no more than `keep` blocks of it.
struct Withdrawal {
  Record record;
  uint64_t keep = 0;
  // The blocks the pod is no longer predicted to hold.
  std::span<const BlockHash> withdrawn() const {
    return std::span<const BlockHash>(record.hashes).subspan(std::min<size_t>(keep, record.hashes.size()));
  }
};

// Appends one record (its time and key) to `out`: the body of a batch, without the batch's header.
void appendRecord(std::string& out, int64_t wall_ms, std::string_view model, std::string_view pod,
                  std::span<const BlockHash> hashes);
// A batch: the header for `count` records followed by `records` (appendRecord's output).
std::string makeBatch(std::string_view records, size_t count);

// A batch of session pins: the header for `count` pins followed by `sessions` (appendSession's output).
void appendSession(std::string& out, const SessionPin& pin);
std::string makeSessionBatch(std::string_view sessions, size_t count);

// A batch of withdrawals: the header for `count` withdrawals followed by `withdrawals` (appendWithdrawal's output).
void appendWithdrawal(std::string& out, int64_t wall_ms, uint64_t keep, std::string_view model, std::string_view pod,
                      std::span<const BlockHash> hashes);
std::string makeWithdrawalBatch(std::string_view withdrawals, size_t count);

// A batch of response entries: the header for `count` entries followed by `responses` (appendResponse's output).
void appendResponse(std::string& out, const ResponseEntry& entry);
std::string makeResponseBatch(std::string_view responses, size_t count);

// Reads a batch (of records, or of session pins) entry by entry. Any malformed byte (a length past the end, a bad
// header or version, a count that does not match, a session id over its bound) ends the reading with error() set;
// entries already returned stay valid.
template <class Entry>
class BatchReaderOf {
 public:
  explicit BatchReaderOf(std::string_view batch);
  // The next entry into `out` (views into the batch); false at the end or on error.
  bool next(Entry& out);
  const std::string& error() const { return error_; }

 private:
  std::string_view in_;
  uint64_t left_ = 0;
  std::string error_;
};
using BatchReader = BatchReaderOf<Record>;
using SessionBatchReader = BatchReaderOf<SessionPin>;
using WithdrawalBatchReader = BatchReaderOf<Withdrawal>;
using ResponseBatchReader = BatchReaderOf<ResponseEntry>;

// A record's key (see above) and its inverse; `decodeKey` also fails on trailing bytes.
std::string encodeKey(std::string_view model, std::string_view pod, std::span<const BlockHash> hashes);
bool decodeKey(std::string_view key, Record& out, std::string& error);
// Reads one record (time and key) from the front of `in`, advancing it; used by BatchReader and the outbox.
bool readRecord(std::string_view& in, Record& out, std::string& error);
// The same for one session pin, and for one withdrawal (which also fails when `keep` exceeds its blocks).
bool readSession(std::string_view& in, SessionPin& out, std::string& error);
bool readWithdrawal(std::string_view& in, Withdrawal& out, std::string& error);
// The same for one response entry (which also fails on an id that is not openai::validResponseId, a pod address
// that is empty or over kMaxPodAddressBytes, or an op other than 0 and 1).
bool readResponse(std::string_view& in, ResponseEntry& out, std::string& error);
// A session pin's snapshot member (see above; wall_ms is the member's score) and its inverse, which also fails on
// trailing bytes.
std::string encodeSessionKey(const SessionPin& pin);
bool decodeSessionKey(std::string_view key, SessionPin& out, std::string& error);
// A response entry's snapshot member (id and pod; wall_ms is the member's score) and its inverse, which also fails
// on trailing bytes and checks what readResponse checks.
std::string encodeResponseKey(const ResponseEntry& entry);
bool decodeResponseKey(std::string_view key, ResponseEntry& out, std::string& error);

}  // namespace prefixgate::sync
