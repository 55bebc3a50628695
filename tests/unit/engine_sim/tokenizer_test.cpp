#include "engine_sim/tokenizer.h"

#include <gtest/gtest.h>

namespace prefixgate::sim {
namespace {

// Ensures text is cut into 4-byte tokens, the last one possibly shorter.
TEST(Tokenizer, SplitsIntoFourByteTokens) {
  EXPECT_TRUE(tokenize("").empty());
  EXPECT_EQ(tokenize("abc").size(), 1u);
  EXPECT_EQ(tokenize("abcd").size(), 1u);
  EXPECT_EQ(tokenize("abcde").size(), 2u);
  std::vector<uint32_t> tokens = tokenize("Hello world!");
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[0], tokenId("Hell"));
  EXPECT_EQ(tokens[1], tokenId("o wo"));
  EXPECT_EQ(tokens[2], tokenId("rld!"));
  EXPECT_EQ(tokenize("abcdef").back(), tokenId("ef"));
}

// Ensures token ids are a fixed function of the bytes (FNV-1a 32), the same in every run and process.
TEST(Tokenizer, IdsAreDeterministicFnv1a) {
  EXPECT_EQ(tokenId(""), 2166136261u);
  EXPECT_EQ(tokenId("a"), 0xe40c292cu);  // the published FNV-1a test vector
  EXPECT_EQ(tokenize("same text"), tokenize("same text"));
  EXPECT_NE(tokenId("abcd"), tokenId("abce"));
}

// Ensures the prompt digest depends on every token and their order.
TEST(Tokenizer, DigestCoversOrder) {
  std::vector<uint32_t> a = {1, 2, 3};
  std::vector<uint32_t> b = {3, 2, 1};
  EXPECT_EQ(tokensDigest(a), tokensDigest(a));
  EXPECT_NE(tokensDigest(a), tokensDigest(b));
}

}  // namespace
}  // namespace prefixgate::sim
