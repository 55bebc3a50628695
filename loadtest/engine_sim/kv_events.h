#pragma once
// vLLM's KV cache events as the simulator publishes them (pure: encoding only; kv_event_publisher.h sends them).
// BlockStored when blocks become findable in the prefix cache (prompt or output blocks, as they fill), BlockRemoved
// when an evicted block's hash is gone, AllBlocksCleared when the whole cache is reset. One batch per engine step,
// msgpack-encoded exactly as vLLM's msgspec structs are, in either of the two encodings vLLM has used:
//   array: batch [ts, [event...], data_parallel_rank]; event ["BlockStored", block_hashes, parent_block_hash,
//          token_ids, block_size, lora_id, medium, lora_name] (trailing fields with defaults omitted),
//          ["BlockRemoved", block_hashes, medium], ["AllBlocksCleared"];
//   map:   {"ts", "events", "data_parallel_rank"} and {"type": "BlockStored", "block_hashes", ...}.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::sim {

struct KvEvent {
  enum class Kind { kStored, kRemoved, kCleared };
  Kind kind = Kind::kStored;
  std::vector<EngineBlockHash> block_hashes;
  std::optional<EngineBlockHash> parent;  // BlockStored: the block before the first one; none at a prompt's start
  std::vector<uint32_t> token_ids;        // BlockStored: the tokens of every stored block, in order
  // BlockStored starting at a salted prompt's first block (parent none): its cache_salt, sent as that block's
  // extra keys ([salt], the rest null) as vLLM does; "" = no extra keys (the field is left out).
  std::string first_block_salt;
};

enum class KvEventEncoding { kArray, kMap };

// Parses "array" or "map".
std::optional<KvEventEncoding> parseKvEventEncoding(std::string_view name);

// One EventBatch as msgpack bytes.
std::string encodeKvEventBatch(double timestamp, std::span<const KvEvent> events, uint32_t block_size,
                               int data_parallel_rank, KvEventEncoding encoding);

}  // namespace prefixgate::sim
