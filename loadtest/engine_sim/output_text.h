#pragma once
// The simulated model's output: deterministic from the prompt, so the same request always produces the same text
// (tests compare responses across pods and runs, and the benchmark predicts replies). Every output token is " "
// plus a three-letter word: exactly kBytesPerToken bytes, so a reply's text, tokenized again in a later turn's
// prompt, gives back the very token ids that were generated (and the engine's cached output blocks can hit).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::sim {

inline constexpr size_t kEmbeddingDimensions = 8;

class OutputText {
 public:
  explicit OutputText(uint64_t seed) : seed_(seed) {}
  // The generator for a prompt: seeded by a digest of its token ids.
  static OutputText forPrompt(std::span<const uint32_t> prompt_tokens);

  // Output token `index` (0-based): a space and a three-letter word.
  std::string token(size_t index) const;
  // The token id of token(index) (the prompt tokenizer's id of the same 4 bytes).
  uint32_t tokenId(size_t index) const;
  // The first `count` tokens concatenated (what a non-streamed response carries).
  std::string text(size_t count) const;

 private:
  std::string_view piece(size_t index) const;
  uint64_t seed_;
};

// A unit-length embedding of kEmbeddingDimensions floats, deterministic from the input's token ids.
std::vector<float> embeddingFor(std::span<const uint32_t> tokens);

}  // namespace prefixgate::sim
