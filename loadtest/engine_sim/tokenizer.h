#pragma once
// The simulator's stand-in for a model tokenizer: the prompt's bytes are cut into tokens of kBytesPerToken bytes
// (the last one may be shorter) and each token's id is a 32-bit FNV-1a hash of its bytes. Deterministic across
// runs and processes, so a test or the gateway's remote tokenizer sees the same ids as the engine.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace prefixgate::sim {

inline constexpr size_t kBytesPerToken = 4;

// The id of one token: FNV-1a (32-bit) over its bytes.
uint32_t tokenId(std::string_view piece);

// Splits text into ceil(size / kBytesPerToken) tokens and returns their ids.
std::vector<uint32_t> tokenize(std::string_view text);

// A 64-bit digest of a token sequence (FNV-1a over the ids), used to seed the output text and embeddings.
uint64_t tokensDigest(std::span<const uint32_t> tokens);

}  // namespace prefixgate::sim
