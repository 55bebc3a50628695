#pragma once
// Chained block hashes, as vLLM computes them for prefix caching: a prompt's tokens are cut into full blocks of
// block_size tokens (a trailing partial block is never cached) and each block's hash covers its parent's hash and
// its own token ids, so equal hashes mean equal prefixes. These are the engine's hashes (EngineBlockHash), a
// different domain from the gateway's BlockHash.
#include <cstdint>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::sim {

// The parent of the first block.
inline constexpr EngineBlockHash kRootBlockHash{0};

// The hash of one block given its parent's hash (64-bit FNV-1a over the parent hash and the token ids).
EngineBlockHash chainBlockHash(EngineBlockHash parent, std::span<const uint32_t> block_tokens);

// The parent of the first block of a request with `salt` as its cache_salt (vLLM mixes the salt into the first
// block's hash, so prompts under different salts, or none, never share a block): kRootBlockHash for no salt.
EngineBlockHash saltedRoot(std::string_view salt);

// The hashes of every full block of tokens, in order, the first chained from saltedRoot(salt). block_size must be
// at least 1.
std::vector<EngineBlockHash> blockHashes(std::span<const uint32_t> tokens, uint32_t block_size,
                                         std::string_view salt = {});

struct EngineBlockHashHasher {
  size_t operator()(EngineBlockHash hash) const noexcept { return static_cast<size_t>(hash.value); }
};

}  // namespace prefixgate::sim
