#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

constexpr uint32_t kFnv32Offset = 2166136261u;
constexpr uint32_t kFnv32Prime = 16777619u;
constexpr uint64_t kFnv64Offset = 14695981039346656037ull;
constexpr uint64_t kFnv64Prime = 1099511628211ull;

}  // namespace

uint32_t tokenId(std::string_view piece) {
  uint32_t hash = kFnv32Offset;
  for (unsigned char byte : piece) {
    hash ^= byte;
    hash *= kFnv32Prime;
  }
  return hash;
}

std::vector<uint32_t> tokenize(std::string_view text) {
  std::vector<uint32_t> tokens;
  appendTokens(text, tokens);
  return tokens;
}

void appendTokens(std::string_view text, std::vector<uint32_t>& tokens) {
  tokens.reserve(tokens.size() + (text.size() + kBytesPerToken - 1) / kBytesPerToken);
  for (size_t offset = 0; offset < text.size(); offset += kBytesPerToken)
    tokens.push_back(tokenId(text.substr(offset, kBytesPerToken)));
}

uint64_t tokensDigest(std::span<const uint32_t> tokens) {
  uint64_t hash = kFnv64Offset;
  for (uint32_t token : tokens) {
    for (int shift = 0; shift < 32; shift += 8) {
      hash ^= (token >> shift) & 0xffu;
      hash *= kFnv64Prime;
    }
  }
  return hash;
}

}  // namespace prefixgate::sim
