#include "engine_sim/block_hash.h"

namespace prefixgate::sim {
namespace {

constexpr uint64_t kFnv64Offset = 14695981039346656037ull;
constexpr uint64_t kFnv64Prime = 1099511628211ull;

void mixBytes(uint64_t& hash, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    hash ^= (value >> (8 * i)) & 0xffu;
    hash *= kFnv64Prime;
  }
}

}  // namespace

EngineBlockHash chainBlockHash(EngineBlockHash parent, std::span<const uint32_t> block_tokens) {
  uint64_t hash = kFnv64Offset;
  mixBytes(hash, parent.value, 8);
  for (uint32_t token : block_tokens) mixBytes(hash, token, 4);
  return EngineBlockHash{hash};
}

EngineBlockHash saltedRoot(std::string_view salt) {
  if (salt.empty()) return kRootBlockHash;
  uint64_t hash = kFnv64Offset;
  for (char c : salt) mixBytes(hash, static_cast<uint8_t>(c), 1);
  return EngineBlockHash{hash == kRootBlockHash.value ? 1 : hash};
}

std::vector<EngineBlockHash> blockHashes(std::span<const uint32_t> tokens, uint32_t block_size, std::string_view salt) {
  std::vector<EngineBlockHash> hashes;
  if (block_size == 0) return hashes;
  size_t full_blocks = tokens.size() / block_size;
  hashes.reserve(full_blocks);
  EngineBlockHash parent = saltedRoot(salt);
  for (size_t block = 0; block < full_blocks; ++block) {
    parent = chainBlockHash(parent, tokens.subspan(block * block_size, block_size));
    hashes.push_back(parent);
  }
  return hashes;
}

}  // namespace prefixgate::sim
