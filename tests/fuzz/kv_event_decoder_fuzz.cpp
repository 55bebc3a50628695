// libFuzzer target for the KV event decoder: whatever bytes arrive, decoding must not crash, hang, leak or trip
// a sanitizer, and its result must keep the decoder's contract (checked below, trapping on a breach).
// Build and run: see tests/fuzz/CMakeLists.txt.
#include <algorithm>
#include <cstdint>
#include <string>
#include <variant>

#include "engine/kv_event_decoder.h"

namespace {

using namespace prefixgate::engine;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void checkBatch(const KvEventBatch& batch) {
  uint32_t by_reason = 0;
  for (uint32_t n : batch.skipped_by_reason) by_reason += n;
  check(by_reason == batch.skipped_events);
  check(batch.events.size() <= kMaxKvEventsPerBatch);
  for (const KvCacheEvent& event : batch.events) {
    if (const auto* stored = std::get_if<KvBlockStored>(&event)) {
      check(stored->block_size > 0);
      check(stored->token_ids.size() <= kMaxKvTokensPerEvent);
      check(stored->extra_keys.empty() || stored->extra_keys.size() == stored->block_hashes.size());
      check(stored->medium != KvMedium::kOther || !stored->medium_name.empty());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  KvEventBatch batch;
  std::string error;
  if (decodeKvEventBatch({data, size}, batch, error)) {
    checkBatch(batch);
    // Decoding is a pure function of the bytes: a second pass gives the same batch.
    KvEventBatch again;
    check(decodeKvEventBatch({data, size}, again, error) && again.events.size() == batch.events.size() &&
          again.skipped_events == batch.skipped_events);
  } else {
    check(std::find(kKvErrorCodes.begin(), kKvErrorCodes.end(), error) != kKvErrorCodes.end());
    check(batch.events.empty() && batch.skipped_events == 0);
  }
  // The frame helpers see the same bytes as a sequence frame.
  if (auto sequence = decodeKvSequence({data, size})) check(encodeKvSequence(*sequence)[0] == data[0]);
  return 0;
}
