// libFuzzer target for the KV event decoder: whatever bytes arrive, decoding must not crash, hang, leak or trip
// a sanitizer, and its result must keep the decoder's contract (checked below, trapping on a breach).
//
// The same input is then read as a stream of messages from several publishers, [control, length (2 bytes, big
// endian), payload]..., each put in order by a KvEventStream and its batch applied to one KvEventIndex with small
// bounds, as the subscriber and KvSync do (the control byte picks the pod, its sequence number, the rank it claims,
// or a reset). After every message the index and the streams must be within their bounds: blocks per rank, per
// index and per tier, ranks, adapters, held bytes, and no index entry outliving the slots' maps.
// Build and run: see tests/fuzz/CMakeLists.txt.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/kv_event_decoder.h"
#include "engine/kv_event_stream.h"
#include "routing/kv/kv_event_index.h"

namespace {

using namespace prefixgate::engine;
using prefixgate::PodId;
using prefixgate::routing::KvEventBounds;
using prefixgate::routing::KvEventIndex;
using prefixgate::routing::KvEventIndexOptions;
using prefixgate::routing::KvPodLimits;

class FixedClock final : public prefixgate::Clock {
 public:
  prefixgate::SteadyTime now() const override { return prefixgate::SteadyTime{}; }
};

// The stream part's bounds: small, so that short inputs reach them.
constexpr size_t kPods = 4;
constexpr size_t kIndexBlocks = 256;
constexpr size_t kPodBlocks = 64;
constexpr size_t kPodAdapters = 4;
constexpr size_t kHeldBytes = 512;
constexpr int64_t kReplayTimeoutMs = 100;

// Pod p declares p % 3 + 1 ranks; odd pods report a KV capacity of 48 blocks of 16 tokens per rank.
KvPodLimits limitsOf(size_t pod) {
  const uint32_t ranks = static_cast<uint32_t>(pod % 3 + 1);
  return KvPodLimits{ranks, pod % 2 == 1 ? uint64_t{48} * 16 * ranks : 0};
}

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

void checkBounds(const KvEventIndex& index, const std::vector<std::unique_ptr<KvEventStream>>& streams) {
  size_t ranks = 0;
  for (size_t pod = 0; pod < kPods; ++pod) {
    const KvPodLimits limits = limitsOf(pod);
    ranks += limits.ranks;
    // A reported capacity bounds a rank instead of kPodBlocks: 48 blocks at 16 tokens, more at a smaller block
    // size, never more than the index.
    const size_t per_rank = limits.capacity_tokens > 0 ? kIndexBlocks : kPodBlocks;
    check(index.podBlocks(PodId{static_cast<uint32_t>(pod + 1)}) <= per_rank * limits.ranks);
    check(index.podModels(PodId{static_cast<uint32_t>(pod + 1)}) <= (kPodAdapters + 1) * limits.ranks);
  }
  check(index.slots() <= ranks);
  check(index.heldBlocks() <= 2 * kIndexBlocks);  // per tier
  check(index.indexEntries() <= index.heldBlocks());
  for (const auto& stream : streams) check(stream->heldBytes() <= kHeldBytes);
}

// The stream part (see the top of the file).
void fuzzStreams(const uint8_t* data, size_t size) {
  FixedClock clock;
  KvEventIndexOptions options{kIndexBlocks, 0.5, 1, 4, {}};
  options.bounds = KvEventBounds{kPodBlocks, kPodAdapters, 32, kHeldBytes, 1024};
  KvEventIndex index(options, clock);
  std::vector<std::unique_ptr<KvEventStream>> streams;
  for (size_t pod = 0; pod < kPods; ++pod)
    streams.push_back(std::make_unique<KvEventStream>(true, 8, kReplayTimeoutMs, kHeldBytes));
  std::vector<int64_t> sequence(kPods, 0);
  KvEventBatch batch;
  std::string error;
  int64_t now_ms = 0;
  auto apply = [&](size_t pod, std::span<const uint8_t> payload, uint8_t control) {
    if (!decodeKvEventBatch(payload, batch, error)) return;
    // Bits 4-5 claim a rank when the batch names none (as the subscriber fills in its port's rank).
    if (!batch.data_parallel_rank) batch.data_parallel_rank = (control >> 4) & 3u;
    index.apply(PodId{static_cast<uint32_t>(pod + 1)}, "m", batch, limitsOf(pod));
  };
  for (size_t at = 0; at + 3 <= size;) {
    const uint8_t control = data[at];
    const size_t length = std::min<size_t>((size_t{data[at + 1]} << 8) | data[at + 2], size - at - 3);
    const std::span<const uint8_t> payload(data + at + 3, length);
    at += 3 + length;
    const size_t pod = control & 3u;
    KvEventStream& stream = *streams[pod];
    now_ms += 10;
    if ((control & 0xC0u) == 0xC0u) {
      index.resetPod(PodId{static_cast<uint32_t>(pod + 1)});
    } else {
      // Bits 6-7: the next number, a skip (a gap), or a repeat (a restart or a duplicate).
      const int64_t step = (control >> 6) == 1 ? 3 : (control >> 6) == 2 ? -2 : 1;
      sequence[pod] = std::max<int64_t>(0, sequence[pod] + step);
      KvEventStream::Action action = stream.live(sequence[pod], now_ms);
      if (action.reset) index.resetPod(PodId{static_cast<uint32_t>(pod + 1)});
      if (action.apply) apply(pod, payload, control);
      if (action.hold) stream.hold(sequence[pod], payload);
    }
    // A replay in progress ends when its time is up (nothing answers here), its held messages applied.
    if (stream.replayTimedOut(now_ms)) {
      KvEventStream::Drain drain = stream.replayEnded(false);
      if (drain.reset) index.resetPod(PodId{static_cast<uint32_t>(pod + 1)});
      for (const auto& [seq, held] : drain.messages) apply(pod, held, control);
    }
    checkBounds(index, streams);
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
  fuzzStreams(data, size);
  return 0;
}
