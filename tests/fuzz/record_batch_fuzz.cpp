// libFuzzer target for the record batches replicas exchange through Redis (sync/record_batch.h): another replica's
// stream entry or a snapshot member is read as untrusted bytes. Nothing may crash, leak, over-allocate or trip a
// sanitizer; every record read, written again, reads back the same; a batch read without error, written again,
// reads back as many records without error; and a key that decodes, encoded again, decodes to the same record.
// Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "sync/record_batch.h"

using namespace prefixgate::sync;
using prefixgate::fuzz::check;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
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
