#include "engine_sim/output_text.h"

#include <array>
#include <cmath>
#include <string_view>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

constexpr std::array<std::string_view, 64> kVocabulary = {
    "the",     "a",       "cache",   "prefix",  "token",   "block",   "model",   "engine",  "request", "router",
    "gateway", "pod",     "latency", "memory",  "is",      "was",     "will",    "can",     "quickly", "slowly",
    "and",     "or",      "but",     "with",    "from",    "into",    "over",    "under",   "river",   "mountain",
    "cloud",   "signal",  "stream",  "packet",  "kernel",  "thread",  "vector",  "matrix",  "layer",   "weight",
    "green",   "blue",    "bright",  "quiet",   "simple",  "steady",  "warm",    "cold",    "first",   "last",
    "answer",  "question", "story",  "number",  "letter",  "window",  "garden",  "bridge",  "station", "harbor",
    "runs",    "moves",   "holds",   "finds"};

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

std::string OutputText::token(size_t index) const {
  uint64_t pick = splitMix64(seed_ ^ splitMix64(static_cast<uint64_t>(index)));
  std::string_view word = kVocabulary[pick % kVocabulary.size()];
  std::string out;
  out.reserve(word.size() + 1);
  if (index > 0) out.push_back(' ');
  out.append(word);
  return out;
}

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
