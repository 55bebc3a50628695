#include "engine/kv_event_decoder.h"

#include <xxhash.h>

#include <algorithm>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>

namespace prefixgate::engine {
namespace {

using nlohmann::json;

// ---- Pre-scan ----
// nlohmann's msgpack reader recurses once per nested container and trusts declared lengths, so a hostile
// payload could overflow the stack or make it loop over a length that is not there. This walk checks the whole
// structure first, iteratively and without allocating, so that the reader only ever sees well-formed, shallow
// input of bounded size.

class ByteCursor {
 public:
  explicit ByteCursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  size_t remaining() const { return bytes_.size() - pos_; }
  bool atEnd() const { return pos_ == bytes_.size(); }
  uint8_t next() { return bytes_[pos_++]; }
  // A big-endian unsigned integer of `width` bytes; false when the input ends first.
  bool readLength(size_t width, uint64_t& out) {
    if (remaining() < width) return false;
    out = 0;
    for (size_t i = 0; i < width; ++i) out = (out << 8) | bytes_[pos_++];
    return true;
  }
  bool skip(uint64_t count) {
    if (count > remaining()) return false;
    pos_ += static_cast<size_t>(count);
    return true;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

// After one value's first byte: how many payload bytes follow its header and how many values it contains.
// Returns an error code, or "" when fine.
std::string_view valueExtent(uint8_t type, ByteCursor& in, uint64_t& skip, uint64_t& children) {
  skip = 0;
  children = 0;
  if (type <= 0x7f || type >= 0xe0 || type == 0xc0 || type == 0xc2 || type == 0xc3) return "";  // fixint, nil, bool
  if (type <= 0x8f) {
    children = 2u * (type & 0x0fu);  // fixmap: a key and a value per entry
    return "";
  }
  if (type <= 0x9f) {
    children = type & 0x0fu;  // fixarray
    return "";
  }
  if (type <= 0xbf) {
    skip = type & 0x1fu;  // fixstr
    return "";
  }
  bool ok = true;
  switch (type) {
    case 0xc4: case 0xd9: ok = in.readLength(1, skip); break;  // bin8, str8
    case 0xc5: case 0xda: ok = in.readLength(2, skip); break;  // bin16, str16
    case 0xc6: case 0xdb: ok = in.readLength(4, skip); break;  // bin32, str32
    case 0xc7: ok = in.readLength(1, skip); ++skip; break;     // ext8 (+ its type byte)
    case 0xc8: ok = in.readLength(2, skip); ++skip; break;     // ext16
    case 0xc9: ok = in.readLength(4, skip); ++skip; break;     // ext32
    case 0xca: skip = 4; break;                                // float32
    case 0xcb: skip = 8; break;                                // float64
    case 0xcc: case 0xd0: skip = 1; break;                     // uint8, int8
    case 0xcd: case 0xd1: skip = 2; break;
    case 0xce: case 0xd2: skip = 4; break;
    case 0xcf: case 0xd3: skip = 8; break;
    case 0xd4: skip = 2; break;  // fixext1..16 (type byte + data)
    case 0xd5: skip = 3; break;
    case 0xd6: skip = 5; break;
    case 0xd7: skip = 9; break;
    case 0xd8: skip = 17; break;
    case 0xdc: ok = in.readLength(2, children); break;  // array16
    case 0xdd: ok = in.readLength(4, children); break;  // array32
    case 0xde: ok = in.readLength(2, children); children *= 2; break;  // map16
    case 0xdf: ok = in.readLength(4, children); children *= 2; break;  // map32
    default: return kKvErrorBadMsgpack;  // 0xc1: never used
  }
  return ok ? "" : kKvErrorTruncated;
}

std::string_view prescan(std::span<const uint8_t> payload) {
  if (payload.size() > kMaxKvEventPayloadBytes) return kKvErrorTooLarge;
  ByteCursor in(payload);
  // pending[d]: values still to read in the container open at depth d; depth 0 is the payload itself (one value).
  std::array<uint64_t, kMaxKvEventDepth + 1> pending{};
  pending[0] = 1;
  size_t depth = 0;
  size_t values = 0;
  for (;;) {
    while (pending[depth] == 0) {
      if (depth == 0) return in.atEnd() ? "" : kKvErrorTrailingBytes;
      --depth;
    }
    --pending[depth];
    if (++values > kMaxKvEventValues) return kKvErrorTooLarge;
    if (in.atEnd()) return kKvErrorTruncated;
    uint64_t skip = 0, children = 0;
    if (std::string_view error = valueExtent(in.next(), in, skip, children); !error.empty()) return error;
    if (!in.skip(skip)) return kKvErrorTruncated;
    // A container's declared count needs no check of its own: its values are read one by one, so a count
    // beyond the input ends as truncated after at most one step per remaining byte.
    if (children == 0) continue;
    if (depth == kMaxKvEventDepth) return kKvErrorTooDeep;
    pending[++depth] = children;
  }
}

// ---- Field readers: each returns false for a value of the wrong type or range ----

bool readUint32(const json& v, uint32_t& out) {
  constexpr uint32_t kMax = std::numeric_limits<uint32_t>::max();
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > kMax) return false;
  } else if (v.is_number_integer()) {  // msgpack's signed encodings may carry non-negative values too
    if (v.get<int64_t>() < 0 || v.get<int64_t>() > int64_t{kMax}) return false;
  } else {
    return false;
  }
  out = v.get<uint32_t>();
  return true;
}

// An unsigned int as is, a signed int (SGLang) by two's complement, or a binary digest as its last 8 bytes read
// big-endian: what vLLM's maybe_convert_block_hash sends when it converts a digest to an int, so a pod's hashes
// agree whichever shape it uses. An ext value is not a digest.
bool readHash(const json& v, EngineBlockHash& out) {
  if (v.is_number_unsigned()) {
    out.value = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer()) {
    out.value = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  if (!v.is_binary() || v.get_binary().has_subtype() || v.get_binary().empty()) return false;
  const std::vector<uint8_t>& digest = v.get_binary();
  out.value = 0;
  for (size_t i = digest.size() > 8 ? digest.size() - 8 : 0; i < digest.size(); ++i)
    out.value = (out.value << 8) | digest[i];
  return true;
}

bool readHashes(const json& v, std::vector<EngineBlockHash>& out) {
  if (!v.is_array()) return false;
  out.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    if (!readHash(v[i], out[i])) return false;
  return true;
}

bool equalsAscii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = (a[i] >= 'a' && a[i] <= 'z') ? static_cast<char>(a[i] - 'a' + 'A') : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

// nil or absent means GPU (vLLM's default tier). The name is compared without case, since connectors other than
// vLLM's own offloading spell it as they like.
bool readMedium(const json* v, KvMedium& medium, std::string& name) {
  medium = KvMedium::kGpu;
  name.clear();
  if (v == nullptr) return true;
  if (!v->is_string()) return false;
  name = v->get_ref<const json::string_t&>();
  medium = equalsAscii(name, "GPU") ? KvMedium::kGpu : equalsAscii(name, "CPU") ? KvMedium::kCpu : KvMedium::kOther;
  return true;
}

bool readGroup(const json* v, uint32_t& out) {
  out = 0;
  return v == nullptr || readUint32(*v, out);
}

// The digest of one block's extra keys, over their canonical msgpack encoding (nlohmann re-encodes every value in
// its shortest form and objects sorted by key), so the same keys always give the same digest. Never 0, which
// means "no extra keys".
uint64_t extraKeysDigest(const json& entry) {
  const std::vector<uint8_t> bytes = json::to_msgpack(entry);
  const uint64_t digest = XXH3_64bits(bytes.data(), bytes.size());
  return digest == 0 ? 1 : digest;
}

// A block's extra keys without its LoRA key: vLLM puts the adapter (lora_name; older versions lora_id) first in every
// block's keys (kv_cache_utils.py: lora keys + multimodal keys + [cache_salt] on the first block + prompt-embedding
// keys), and the index already keeps an adapter's blocks apart under its name, where a request naming the adapter
// finds them. Left in, the adapter's blocks would never match any request. 0 when nothing else is left.
uint64_t extraKeysDigestBesidesLora(const json& entry, const KvBlockStored& event) {
  if (!entry.is_array() || entry.empty()) return extraKeysDigest(entry);
  const json& first = entry.front();
  const bool lora = (!event.lora_name.empty() && first.is_string() &&
                     first.get_ref<const json::string_t&>() == event.lora_name) ||
                    (event.lora_id && first.is_number_integer() && first.get<int64_t>() == *event.lora_id);
  if (!lora) return extraKeysDigest(entry);
  if (entry.size() == 1) return 0;
  return extraKeysDigest(json(json::array_t(entry.begin() + 1, entry.end())));
}

// ---- Events ----

// One event's fields, by position (array form: the tag is element 0) or by name (map form: the tag is "type").
// Nil reads as absent: msgspec writes a None field either as nil or, at the end of an array, not at all.
class EventFields {
 public:
  explicit EventFields(const json& event) : event_(event) {}
  const json* get(size_t position, const char* name) const {
    const json* v = nullptr;
    if (event_.is_array()) {
      if (position < event_.size()) v = &event_[position];
    } else if (auto it = event_.find(name); it != event_.end()) {
      v = &*it;
    }
    return v != nullptr && !v->is_null() ? v : nullptr;
  }

 private:
  const json& event_;
};

enum class EventOutcome { kOk, kBad, kTooManyTokens };

EventOutcome decodeStored(const EventFields& f, KvBlockStored& out) {
  const json* hashes = f.get(1, "block_hashes");
  const json* parent = f.get(2, "parent_block_hash");
  const json* tokens = f.get(3, "token_ids");
  const json* block_size = f.get(4, "block_size");
  if (hashes == nullptr || tokens == nullptr || block_size == nullptr) return EventOutcome::kBad;
  if (!readHashes(*hashes, out.block_hashes)) return EventOutcome::kBad;
  if (parent != nullptr && !readHash(*parent, out.parent.emplace())) return EventOutcome::kBad;
  if (!tokens->is_array()) return EventOutcome::kBad;
  if (tokens->size() > kMaxKvTokensPerEvent) return EventOutcome::kTooManyTokens;
  out.token_ids.resize(tokens->size());
  for (size_t i = 0; i < tokens->size(); ++i)
    if (!readUint32((*tokens)[i], out.token_ids[i])) return EventOutcome::kBad;
  if (!readUint32(*block_size, out.block_size) || out.block_size == 0) return EventOutcome::kBad;

  if (const json* lora_id = f.get(5, "lora_id")) {
    if (!lora_id->is_number_integer()) return EventOutcome::kBad;
    if (lora_id->is_number_unsigned() &&
        lora_id->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return EventOutcome::kBad;
    out.lora_id = lora_id->get<int64_t>();
  }
  if (!readMedium(f.get(6, "medium"), out.medium, out.medium_name)) return EventOutcome::kBad;
  if (const json* lora_name = f.get(7, "lora_name")) {
    if (!lora_name->is_string()) return EventOutcome::kBad;
    out.lora_name = lora_name->get_ref<const json::string_t&>();
  }
  if (const json* extra = f.get(8, "extra_keys")) {
    // One entry per block; a list that does not line up with the blocks cannot say which block has which keys.
    if (!extra->is_array() || extra->size() != out.block_hashes.size()) return EventOutcome::kBad;
    bool any = false;
    out.extra_keys.resize(extra->size());
    for (size_t i = 0; i < extra->size(); ++i) {
      const json& entry = (*extra)[i];
      out.extra_keys[i] = entry.is_null() ? 0 : extraKeysDigestBesidesLora(entry, out);
      any |= out.extra_keys[i] != 0;
    }
    if (!any) out.extra_keys.clear();
  }
  if (!readGroup(f.get(9, "group_idx"), out.group_idx)) return EventOutcome::kBad;
  return EventOutcome::kOk;
}

EventOutcome decodeRemoved(const EventFields& f, KvBlockRemoved& out) {
  const json* hashes = f.get(1, "block_hashes");
  if (hashes == nullptr || !readHashes(*hashes, out.block_hashes)) return EventOutcome::kBad;
  if (!readMedium(f.get(2, "medium"), out.medium, out.medium_name)) return EventOutcome::kBad;
  if (!readGroup(f.get(3, "group_idx"), out.group_idx)) return EventOutcome::kBad;
  return EventOutcome::kOk;
}

void countSkip(KvEventBatch& batch, KvSkipReason reason, uint32_t count = 1) {
  batch.skipped_events += count;
  batch.skipped_by_reason[static_cast<size_t>(reason)] += count;
}

// Appends the decoded event to batch.events, or counts why it was skipped.
void decodeEvent(const json& event, KvEventBatch& batch) {
  const json* tag = nullptr;
  if (event.is_array() && !event.empty()) {
    tag = &event[0];
  } else if (event.is_object()) {
    if (auto it = event.find("type"); it != event.end()) tag = &*it;
  }
  if (tag == nullptr || !tag->is_string()) return countSkip(batch, KvSkipReason::kBadEvent);
  const std::string& name = tag->get_ref<const json::string_t&>();
  const EventFields fields(event);
  EventOutcome outcome = EventOutcome::kOk;
  if (name == "BlockStored") {
    KvBlockStored stored;
    if ((outcome = decodeStored(fields, stored)) == EventOutcome::kOk) batch.events.emplace_back(std::move(stored));
  } else if (name == "BlockRemoved") {
    KvBlockRemoved removed;
    if ((outcome = decodeRemoved(fields, removed)) == EventOutcome::kOk) batch.events.emplace_back(std::move(removed));
  } else if (name == "AllBlocksCleared") {
    batch.events.emplace_back(KvAllBlocksCleared{});
  } else {
    return countSkip(batch, KvSkipReason::kUnknownTag);
  }
  if (outcome == EventOutcome::kBad) countSkip(batch, KvSkipReason::kBadEvent);
  if (outcome == EventOutcome::kTooManyTokens) countSkip(batch, KvSkipReason::kTooManyTokens);
}

// ---- Batch ----

std::string_view decodeBatch(const json& root, KvEventBatch& out) {
  const json* ts = nullptr;
  const json* events = nullptr;
  const json* rank = nullptr;
  if (root.is_array()) {
    if (root.size() < 2) return kKvErrorNotABatch;
    ts = &root[0];
    events = &root[1];
    if (root.size() > 2) rank = &root[2];
  } else if (root.is_object()) {
    auto find = [&root](const char* key) -> const json* {
      auto it = root.find(key);
      return it == root.end() ? nullptr : &*it;
    };
    ts = find("ts");
    events = find("events");
    rank = find("data_parallel_rank");
  }
  if (ts == nullptr || !ts->is_number() || events == nullptr || !events->is_array()) return kKvErrorNotABatch;
  if (rank != nullptr && !rank->is_null()) {
    uint32_t value = 0;
    if (!readUint32(*rank, value)) return kKvErrorBadRank;
    out.data_parallel_rank = value;
  }
  out.timestamp = ts->get<double>();
  const size_t kept = std::min(events->size(), kMaxKvEventsPerBatch);
  out.events.reserve(kept);
  for (size_t i = 0; i < kept; ++i) decodeEvent((*events)[i], out);
  if (events->size() > kept)
    countSkip(out, KvSkipReason::kTooManyEvents, static_cast<uint32_t>(events->size() - kept));
  return "";
}

std::optional<KvEventMessage> splitFrames(std::span<const std::span<const uint8_t>> frames) {
  if (frames.size() != 3) return std::nullopt;
  const std::optional<int64_t> sequence = decodeKvSequence(frames[1]);
  if (!sequence) return std::nullopt;
  return KvEventMessage{*sequence, frames[2]};
}

}  // namespace

std::string_view kvSkipReasonName(KvSkipReason reason) {
  switch (reason) {
    case KvSkipReason::kUnknownTag: return "unknown_tag";
    case KvSkipReason::kBadEvent: return "bad_event";
    case KvSkipReason::kTooManyTokens: return "too_many_tokens";
    case KvSkipReason::kTooManyEvents: return "too_many_events";
  }
  return "unknown";
}

bool decodeKvEventBatch(std::span<const uint8_t> payload, KvEventBatch& out, std::string& error) {
  out = KvEventBatch{};
  std::string_view code = prescan(payload);
  if (code.empty()) {
    KvEventBatch batch;  // moved to `out` only when whole, so a failure never leaves half a batch there
    // Nothing here should throw once the pre-scan passed, but a payload must never take the subscriber down.
    try {
      const json root = json::from_msgpack(payload.begin(), payload.end(), /*strict=*/true, /*allow_exceptions=*/false);
      code = root.is_discarded() ? kKvErrorBadMsgpack : decodeBatch(root, batch);
    } catch (const std::bad_alloc&) {
      code = kKvErrorTooLarge;
    } catch (const std::exception&) {
      code = kKvErrorBadMsgpack;
    }
    if (code.empty()) {
      out = std::move(batch);
      return true;
    }
  }
  error = code;
  return false;
}

std::array<uint8_t, 8> encodeKvSequence(int64_t sequence) {
  std::array<uint8_t, 8> bytes{};
  auto bits = static_cast<uint64_t>(sequence);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  return bytes;
}

std::optional<int64_t> decodeKvSequence(std::span<const uint8_t> frame) {
  if (frame.size() != 8) return std::nullopt;
  uint64_t bits = 0;
  for (uint8_t b : frame) bits = (bits << 8) | b;
  return static_cast<int64_t>(bits);
}

std::optional<KvEventMessage> splitKvEventMessage(std::span<const std::span<const uint8_t>> frames) {
  std::optional<KvEventMessage> message = splitFrames(frames);
  if (message && message->sequence < 0) return std::nullopt;  // vLLM counts up from 0
  return message;
}

std::optional<KvEventMessage> splitKvReplayReply(std::span<const std::span<const uint8_t>> frames) {
  if (frames.size() != 3 || !frames[0].empty()) return std::nullopt;
  std::optional<KvEventMessage> message = splitFrames(frames);
  if (message && message->sequence < kKvReplayEndSequence) return std::nullopt;
  return message;
}

uint64_t cacheSaltDigest(std::string_view salt) {
  if (salt.empty()) return 0;
  return extraKeysDigest(json::array({std::string(salt)}));
}

}  // namespace prefixgate::engine
