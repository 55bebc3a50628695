#include "engine_sim/output_text.h"

#include <array>
#include <cmath>
#include <string_view>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

// The benchmark replicates this list (loadtest/bench/textgen.py): change both together.
constexpr std::array<std::string_view, 64> kVocabulary = {
    " the", " and", " for", " are", " but", " not", " you", " all", " any", " can", " had", " her",
    " was", " one", " our", " out", " day", " get", " has", " him", " his", " how", " man", " new",
    " now", " old", " see", " two", " way", " who", " boy", " did", " its", " let", " put", " say",
    " she", " too", " use", " gpu", " llm", " row", " key", " map", " set", " bit", " log", " run",
    " top", " end", " sum", " max", " min", " net", " web", " sky", " sea", " sun", " red", " big",
    " low", " far", " hot", " cup"};

uint64_t splitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

OutputText OutputText::forPrompt(std::span<const uint32_t> prompt_tokens) {
  return OutputText(tokensDigest(prompt_tokens));
}

std::string_view OutputText::piece(size_t index) const {
  uint64_t pick = splitMix64(seed_ ^ splitMix64(static_cast<uint64_t>(index)));
  return kVocabulary[pick % kVocabulary.size()];
}

std::string OutputText::token(size_t index) const { return std::string(piece(index)); }

uint32_t OutputText::tokenId(size_t index) const { return sim::tokenId(piece(index)); }

std::string OutputText::text(size_t count) const {
  std::string out;
  for (size_t i = 0; i < count; ++i) out += token(i);
  return out;
}

std::vector<float> embeddingFor(std::span<const uint32_t> tokens) {
  uint64_t seed = tokensDigest(tokens);
  std::vector<double> raw(kEmbeddingDimensions);
  double norm = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    uint64_t bits = splitMix64(seed + i);
    // Top 53 bits to [-1, 1).
    raw[i] = static_cast<double>(bits >> 11) / static_cast<double>(1ull << 52) - 1.0;
    norm += raw[i] * raw[i];
  }
  norm = norm > 0 ? std::sqrt(norm) : 1.0;
  std::vector<float> embedding;
  embedding.reserve(raw.size());
  for (double value : raw) embedding.push_back(static_cast<float>(value / norm));
  return embedding;
}

}  // namespace prefixgate::sim
