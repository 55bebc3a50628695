#pragma once
// A decoder of vLLM's KV cache events (../shared/reference/vllm-interfaces.md, "KV cache events"): the msgpack
// payload of one ZMQ message, in either encoding vLLM has used (array_like structs, or maps with the event tag
// under "type"), plus the 8-byte sequence frames around it. Pure: no sockets, no clock, no logging.
//
// The payload comes off the network, so decoding never throws, never recurses deeper than kMaxKvEventDepth and
// never allocates more than a small multiple of the payload's size (itself capped). A batch that cannot be used
// as a whole fails with a reason code; one bad event inside a good batch is skipped and counted, so the rest of
// the batch still reaches the index.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::engine {

// Limits on what one payload may hold. Each is far above what vLLM sends (one message per engine step: a step
// stores at most max_num_batched_tokens worth of blocks), so reaching one means a broken or hostile publisher.
// The subscriber should set ZMQ_MAXMSGSIZE to kMaxKvEventPayloadBytes so that larger messages are never received.
inline constexpr size_t kMaxKvEventPayloadBytes = 8u << 20;
// msgpack values in one payload: bounds the decoded tree to about 16 bytes per value.
inline constexpr size_t kMaxKvEventValues = 4'000'000;
// Containers nested in one payload. vLLM nests 5 (batch, events, event, extra_keys, one block's keys); the rest
// is room for extra keys that hold tuples.
inline constexpr size_t kMaxKvEventDepth = 16;
inline constexpr size_t kMaxKvEventsPerBatch = 100'000;
inline constexpr size_t kMaxKvTokensPerEvent = 1'000'000;

// Reason codes for a batch that decodeKvEventBatch refuses, fit for a metric label.
inline constexpr std::string_view kKvErrorTooLarge = "too_large";            // over a size or value-count cap
inline constexpr std::string_view kKvErrorTruncated = "truncated";           // ends inside a value, or a declared
                                                                             // length runs past the end
inline constexpr std::string_view kKvErrorTooDeep = "too_deep";              // nesting over kMaxKvEventDepth
inline constexpr std::string_view kKvErrorTrailingBytes = "trailing_bytes";  // bytes after the batch
inline constexpr std::string_view kKvErrorBadMsgpack = "bad_msgpack";        // reserved byte, non-string map key
inline constexpr std::string_view kKvErrorNotABatch = "not_a_batch";         // wrong shape, ts or events
inline constexpr std::string_view kKvErrorBadRank = "bad_rank";              // data_parallel_rank not a uint32
inline constexpr std::array<std::string_view, 7> kKvErrorCodes = {
    kKvErrorTooLarge, kKvErrorTruncated,  kKvErrorTooDeep, kKvErrorTrailingBytes,
    kKvErrorBadMsgpack, kKvErrorNotABatch, kKvErrorBadRank};

// Why one event of a good batch was skipped.
enum class KvSkipReason {
  kUnknownTag,     // an event kind this decoder does not know (a newer vLLM): harmless
  kBadEvent,       // a known kind with a missing or mistyped field: what it said is lost
  kTooManyTokens,  // token_ids over kMaxKvTokensPerEvent
  kTooManyEvents,  // past kMaxKvEventsPerBatch
};
inline constexpr size_t kKvSkipReasonCount = 4;
// "unknown_tag", "bad_event", "too_many_tokens", "too_many_events": metric labels.
std::string_view kvSkipReasonName(KvSkipReason reason);

// The storage tier a block is in. Only GPU blocks make a prefill nearly free; CPU-tier blocks (KV offloading)
// still save compute but cost a transfer, so the index gives them partial credit.
enum class KvMedium { kGpu, kCpu, kOther };

struct KvBlockStored {
  std::vector<EngineBlockHash> block_hashes;
  std::optional<EngineBlockHash> parent;  // the block before block_hashes[0]; none at a prompt's start
  // The tokens of every stored block, concatenated. Usually block_hashes.size() * block_size of them, but not
  // always: vLLM leaves null and masked-out blocks (sliding window, Mamba groups) out of block_hashes while
  // their tokens stay in token_ids. The index must check the count before chaining hashes block by block.
  std::vector<uint32_t> token_ids;
  uint32_t block_size = 0;  // > 0
  KvMedium medium = KvMedium::kGpu;
  std::string medium_name;  // as sent ("" when nil or absent); tells kOther tiers apart
  std::optional<int64_t> lora_id;
  std::string lora_name;  // "" = none
  // Per block, a digest of the block's extra keys (multimodal hashes, cache salt, LoRA name, prompt-embedding
  // hashes), 0 = none. Empty when no block has any. Equal keys give equal digests (they are re-encoded
  // canonically before hashing); the index keeps blocks with different digests apart.
  std::vector<uint64_t> extra_keys;
  uint32_t group_idx = 0;  // KV cache group (hybrid models): the same hash in two groups is two blocks
};

struct KvBlockRemoved {
  std::vector<EngineBlockHash> block_hashes;
  KvMedium medium = KvMedium::kGpu;
  std::string medium_name;
  uint32_t group_idx = 0;
};

struct KvAllBlocksCleared {};

using KvCacheEvent = std::variant<KvBlockStored, KvBlockRemoved, KvAllBlocksCleared>;

struct KvEventBatch {
  double timestamp = 0;  // the engine's wall clock, seconds
  std::vector<KvCacheEvent> events;
  // vLLM always fills it in; each rank publishes on its own port (base port + rank), so the subscriber can check
  // it against the port it read from.
  std::optional<uint32_t> data_parallel_rank;
  uint32_t skipped_events = 0;  // events left out, all reasons together
  std::array<uint32_t, kKvSkipReasonCount> skipped_by_reason{};  // indexed by KvSkipReason
  uint32_t skipped(KvSkipReason reason) const { return skipped_by_reason[static_cast<size_t>(reason)]; }
};

// Decodes one message payload into `out` (cleared first). Returns false, with `error` set to one of
// kKvErrorCodes, when the batch as a whole cannot be used; `out` is then empty. Thread-safe (no shared state).
bool decodeKvEventBatch(std::span<const uint8_t> payload, KvEventBatch& out, std::string& error);

// The digest (as KvBlockStored::extra_keys holds it) of the extra keys vLLM gives the first block of a request with
// `salt` as its cache_salt and nothing else (no multimodal input; a LoRA adapter's own key is left out: see the
// decoder): the keys ("<salt>",). 0 for an empty salt. The gateway mixes it into a salted prompt's first block, so
// the prompt matches exactly the blocks engines stored under the same salt.
uint64_t cacheSaltDigest(std::string_view salt);

// ---- Frames around the payload ----
// A published message is [topic, sequence, payload]. A replay is asked for with [empty, start sequence] on a
// DEALER socket and answered with [empty, sequence, payload] per buffered message from `start` on, then
// [empty, kKvReplayEndSequence, empty]. Sequences are 8-byte big-endian, from 0 and +1 per message.
inline constexpr int64_t kKvReplayEndSequence = -1;

std::array<uint8_t, 8> encodeKvSequence(int64_t sequence);
// None unless the frame is exactly 8 bytes.
std::optional<int64_t> decodeKvSequence(std::span<const uint8_t> frame);

struct KvEventMessage {
  int64_t sequence = 0;
  std::span<const uint8_t> payload;  // points into the frames passed in
};
// A PUB message: 3 frames, any topic. None when the shape is wrong.
std::optional<KvEventMessage> splitKvEventMessage(std::span<const std::span<const uint8_t>> frames);
// A replay reply: 3 frames, the first empty. sequence == kKvReplayEndSequence (with an empty payload) ends the
// replay. None when the shape is wrong.
std::optional<KvEventMessage> splitKvReplayReply(std::span<const std::span<const uint8_t>> frames);

}  // namespace prefixgate::engine
