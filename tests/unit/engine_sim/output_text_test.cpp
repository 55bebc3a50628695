#include "engine_sim/output_text.h"

#include <cmath>
#include <gtest/gtest.h>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

// Ensures the same prompt always produces the same text, and the text is its tokens concatenated.
TEST(OutputText, DeterministicFromPrompt) {
  std::vector<uint32_t> prompt = tokenize("Tell me a story about caches");
  OutputText a = OutputText::forPrompt(prompt);
  OutputText b = OutputText::forPrompt(tokenize("Tell me a story about caches"));
  EXPECT_EQ(a.text(20), b.text(20));
  std::string joined;
  for (size_t i = 0; i < 5; ++i) joined += a.token(i);
  EXPECT_EQ(a.text(5), joined);
  EXPECT_EQ(a.text(0), "");
}

// Ensures every token is a space and a three-letter word (exactly one prompt token when read back), and that
// its id is the prompt tokenizer's id of those 4 bytes.
TEST(OutputText, EveryTokenIsOnePromptToken) {
  OutputText output(42);
  for (size_t i = 0; i < 50; ++i) {
    std::string token = output.token(i);
    ASSERT_EQ(token.size(), kBytesPerToken);
    EXPECT_EQ(token.front(), ' ');
    EXPECT_EQ(output.tokenId(i), tokenId(token));
  }
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < 30; ++i) ids.push_back(output.tokenId(i));
  EXPECT_EQ(tokenize(output.text(30)), ids);
}

// Pins the generator so the benchmark's replica (loadtest/bench/textgen.py) can be checked against the same
// values: the seed is FNV-1a 64 over the prompt ids' little-endian bytes, the word splitmix64-picked.
TEST(OutputText, KnownReply) {
  std::vector<uint32_t> prompt = {1, 2, 3};
  EXPECT_EQ(tokensDigest(prompt), 0xfd1f0f4381eb0395ull);
  EXPECT_EQ(OutputText::forPrompt(prompt).text(4), " man out man boy");  // computed independently in Python
}

// Ensures different prompts give different output (the seed matters).
TEST(OutputText, DifferentPromptsDiffer) {
  EXPECT_NE(OutputText::forPrompt(tokenize("prompt one")).text(20),
            OutputText::forPrompt(tokenize("prompt two")).text(20));
}

// Ensures embeddings have 8 deterministic dimensions of unit length.
TEST(OutputText, EmbeddingDeterministicUnitLength) {
  std::vector<float> a = embeddingFor(tokenize("embed me"));
  ASSERT_EQ(a.size(), kEmbeddingDimensions);
  EXPECT_EQ(a, embeddingFor(tokenize("embed me")));
  EXPECT_NE(a, embeddingFor(tokenize("embed you")));
  double norm = 0;
  for (float v : a) norm += double{v} * v;
  EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
}

}  // namespace
}  // namespace prefixgate::sim
