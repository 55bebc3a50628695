// libFuzzer target for the record and session pin batches replicas exchange through Redis (sync/record_batch.h):
// another replica's stream entry or a snapshot member is read as untrusted bytes, as records, session pins and
// withdrawals and response ids.
// Nothing may crash, leak, over-allocate or trip a sanitizer; every record or pin read, written again, reads back
// the same; a batch read without error, written again, reads back as many entries without error; a key that
// decodes, encoded again, decodes to the same record or pin; no session id over SessionTable::kMaxIdBytes is read,
// nor a response id that is not openai::validResponseId or a pod address over kMaxPodAddressBytes.
// Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "openai/responses_request.h"
#include "routing/session_table.h"
#include "sync/record_batch.h"

using namespace prefixgate::sync;
using prefixgate::fuzz::check;

namespace {

bool samePin(const SessionPin& a, const SessionPin& b) {
  return a.wall_ms == b.wall_ms && a.pinned_ms == b.pinned_ms && a.id == b.id && a.pod == b.pod;
}

void sessions(std::string_view in) {
  SessionBatchReader reader(in);
  SessionPin pin;
  std::string again;
  size_t count = 0;
  while (reader.next(pin)) {
    check(pin.id.size() <= prefixgate::routing::SessionTable::kMaxIdBytes && pin.pinned_ms <= pin.wall_ms);
    std::string one;
    appendSession(one, pin);
    std::string_view view = one;
    SessionPin back;
    std::string error;
    check(readSession(view, back, error) && view.empty() && samePin(back, pin));
    again += one;
    ++count;
  }
  if (reader.error().empty()) {
    const std::string rewritten = makeSessionBatch(again, count);
    SessionBatchReader second(rewritten);
    size_t n = 0;
    while (second.next(pin)) ++n;
    check(second.error().empty() && n == count);
  }
  SessionPin key;
  std::string error;
  if (decodeSessionKey(in, key, error)) {
    const std::string encoded = encodeSessionKey(key);
    SessionPin back;
    check(decodeSessionKey(encoded, back, error) && back.id == key.id && back.pod == key.pod &&
          back.pinned_ms == key.pinned_ms);
  }
}

// Withdrawals: each one read keeps no more than its blocks, and written again reads back the same.
void withdrawals(std::string_view in) {
  WithdrawalBatchReader reader(in);
  Withdrawal w;
  while (reader.next(w)) {
    check(w.keep <= w.record.hashes.size() && w.withdrawn().size() == w.record.hashes.size() - w.keep);
    std::string one;
    appendWithdrawal(one, w.record.wall_ms, w.keep, w.record.model, w.record.pod, w.record.hashes);
    std::string_view view = one;
    Withdrawal back;
    std::string error;
    check(readWithdrawal(view, back, error) && view.empty() && back.keep == w.keep &&
          back.record.wall_ms == w.record.wall_ms && back.record.model == w.record.model &&
          back.record.pod == w.record.pod && back.record.hashes == w.record.hashes);
  }
}

// Response ids: each one read is a valid id on a bounded, non-empty pod address, and written again reads back the same.
void responses(std::string_view in) {
  ResponseBatchReader reader(in);
  ResponseEntry e;
  std::string again;
  size_t count = 0;
  while (reader.next(e)) {
    check(prefixgate::openai::validResponseId(e.id) && !e.pod.empty() && e.pod.size() <= kMaxPodAddressBytes);
    std::string one;
    appendResponse(one, e);
    std::string_view view = one;
    ResponseEntry back;
    std::string error;
    check(readResponse(view, back, error) && view.empty() && back.wall_ms == e.wall_ms &&
          back.remembered == e.remembered && back.id == e.id && back.pod == e.pod);
    again += one;
    ++count;
  }
  if (reader.error().empty()) {
    const std::string rewritten = makeResponseBatch(again, count);
    ResponseBatchReader second(rewritten);
    size_t n = 0;
    while (second.next(e)) ++n;
    check(second.error().empty() && n == count);
  }
  ResponseEntry key;
  std::string error;
  if (decodeResponseKey(in, key, error)) {
    ResponseEntry back;
    check(decodeResponseKey(encodeResponseKey(key), back, error) && back.id == key.id && back.pod == key.pod);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  sessions(in);
  withdrawals(in);
  responses(in);
  BatchReader reader(in);
  Record r;
  std::string again;
  size_t count = 0;
  while (reader.next(r)) {
    std::string one;
    appendRecord(one, r.wall_ms, r.model, r.pod, r.hashes);
    std::string_view view = one;
    Record back;
    std::string error;
    check(readRecord(view, back, error) && view.empty());
    check(back.wall_ms == r.wall_ms && back.model == r.model && back.pod == r.pod && back.hashes == r.hashes);
    again += one;
    ++count;
  }
  // (Not byte for byte: a varint may arrive in a longer form than the writer's shortest one.)
  if (reader.error().empty()) {
    const std::string rewritten = makeBatch(again, count);
    BatchReader second(rewritten);
    size_t n = 0;
    while (second.next(r)) ++n;
    check(second.error().empty() && n == count);
  }
  Record key;
  std::string error;
  if (decodeKey(in, key, error)) {
    const std::string encoded = encodeKey(key.model, key.pod, key.hashes);
    Record back;
    check(decodeKey(encoded, back, error) && back.model == key.model && back.pod == key.pod &&
          back.hashes == key.hashes);
  }
  return 0;
}
