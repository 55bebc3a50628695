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

// Ensures one word per token: the first without a leading space, the others with one.
TEST(OutputText, OneWordPerToken) {
  OutputText output(42);
  EXPECT_NE(output.token(0).front(), ' ');
  for (size_t i = 1; i < 50; ++i) {
    std::string token = output.token(i);
    ASSERT_GE(token.size(), 2u);
    EXPECT_EQ(token.front(), ' ');
    EXPECT_EQ(token.find(' ', 1), std::string::npos);
  }
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
