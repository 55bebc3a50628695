#pragma once
// The simulated model's output: deterministic from the prompt, so the same request always produces the same text
// (tests compare responses across pods and runs). One word of a small vocabulary per output token.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace prefixgate::sim {

inline constexpr size_t kEmbeddingDimensions = 8;

class OutputText {
 public:
  explicit OutputText(uint64_t seed) : seed_(seed) {}
  // The generator for a prompt: seeded by a digest of its token ids.
  static OutputText forPrompt(std::span<const uint32_t> prompt_tokens);

  // Output token `index` (0-based): a word, with a leading space after the first token.
  std::string token(size_t index) const;
  // The first `count` tokens concatenated (what a non-streamed response carries).
  std::string text(size_t count) const;

 private:
  uint64_t seed_;
};

// A unit-length embedding of kEmbeddingDimensions floats, deterministic from the input's token ids.
std::vector<float> embeddingFor(std::span<const uint32_t> tokens);

}  // namespace prefixgate::sim
