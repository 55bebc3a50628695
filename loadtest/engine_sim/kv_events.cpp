#include "engine_sim/kv_events.h"

#include <nlohmann/json.hpp>

namespace prefixgate::sim {
namespace {

using nlohmann::json;

constexpr const char* kMediumGpu = "GPU";

json hashList(const std::vector<EngineBlockHash>& hashes) {
  json list = json::array();
  for (EngineBlockHash hash : hashes) list.push_back(hash.value);
  return list;
}

json eventJson(const KvEvent& event, uint32_t block_size, KvEventEncoding encoding) {
  bool map = encoding == KvEventEncoding::kMap;
  switch (event.kind) {
    case KvEvent::Kind::kStored: {
      json parent = event.parent ? json(event.parent->value) : json(nullptr);
      json stored = map ? json{{"type", "BlockStored"},   {"block_hashes", hashList(event.block_hashes)},
                               {"parent_block_hash", parent}, {"token_ids", event.token_ids},
                               {"block_size", block_size}, {"lora_id", nullptr},
                               {"medium", kMediumGpu},     {"lora_name", nullptr}}
                        : json::array({"BlockStored", hashList(event.block_hashes), parent, event.token_ids,
                                       block_size, nullptr, kMediumGpu, nullptr});
      if (!event.first_block_salt.empty()) {
        // vLLM's extra_keys: one entry per block, the salt only on the prompt's first block.
        json extra(json::value_t::array);
        extra.push_back(json::array({event.first_block_salt}));
        for (size_t i = 1; i < event.block_hashes.size(); ++i) extra.push_back(nullptr);
        if (map)
          stored["extra_keys"] = std::move(extra);
        else
          stored.push_back(std::move(extra));
      }
      return stored;
    }
    case KvEvent::Kind::kRemoved:
      if (map) return json{{"type", "BlockRemoved"}, {"block_hashes", hashList(event.block_hashes)}, {"medium", kMediumGpu}};
      return json::array({"BlockRemoved", hashList(event.block_hashes), kMediumGpu});
    case KvEvent::Kind::kCleared:
      if (map) return json{{"type", "AllBlocksCleared"}};
      return json::array({"AllBlocksCleared"});
  }
  return json();
}

}  // namespace

std::optional<KvEventEncoding> parseKvEventEncoding(std::string_view name) {
  if (name == "array") return KvEventEncoding::kArray;
  if (name == "map") return KvEventEncoding::kMap;
  return std::nullopt;
}

std::string encodeKvEventBatch(double timestamp, std::span<const KvEvent> events, uint32_t block_size,
                               int data_parallel_rank, KvEventEncoding encoding) {
  json list = json::array();
  for (const KvEvent& event : events) list.push_back(eventJson(event, block_size, encoding));
  json batch = encoding == KvEventEncoding::kMap
                   ? json{{"ts", timestamp}, {"events", std::move(list)}, {"data_parallel_rank", data_parallel_rank}}
                   : json::array({timestamp, std::move(list), data_parallel_rank});
  std::vector<uint8_t> bytes = json::to_msgpack(batch);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace prefixgate::sim
