// The safe cut points of cl100k text (nextSafeCut) and the segment cache built on them, over seeded random texts
// full of the cases the split pattern treats specially.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tiktoken_test_support.h"
#include "tokenize/cl100k_splitter.h"

namespace prefixgate::tokenize {
namespace {

using testing::encodeIds;

// Contractions in any case, runs of every kind of white space (\r\n, U+00A0, U+3000, U+0085), digit groups, CJK,
// emoji with joiners, punctuation runs and invalid UTF-8 bytes (which the tokenizer accepts as single bytes).
std::string randomText(std::mt19937_64& rng, size_t bytes) {
  static const char* const kAtoms[] = {
      "'s", "'T", "'re", "'VE", "'m", "'ll", "'D", "'ſ", "''", " don't", " it's", "\n", "\n", "\n\n", "\r\n", " \n",
      "\t\n", "  \n", "\n ", "\n\t", " ", "   ", "\t", "\u00a0", "\u3000", "\u0085", "\n\u00a0x", "1", "12", "123",
      "1234567", " 42", "3.14159", "東京", "漢字かな", "한국어", "日本語の文", "😀", "👨‍👩‍👧‍👦", "🏳️‍🌈", "...", "!!!\n",
      "->", "{}", " (x)", "\xff", "\xe6\x97", "\xc3", "\x80\x80", "word", " Word", " WORD", "ab", "x1", "naïve"};
  std::string text;
  while (text.size() < bytes) text += kAtoms[rng() % std::size(kAtoms)];
  return text;
}

std::vector<std::string_view> concat(std::vector<std::string_view> a, const std::vector<std::string_view>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Cl100kSafeCut, SplittingAtACutGivesThePiecesOfTheWhole) {
  // Ensures every cut nextSafeCut offers splits the text exactly as the whole text splits, over random texts.
  std::mt19937_64 rng(7);
  size_t cuts = 0;
  for (int round = 0; round < 300; ++round) {
    const std::string text = randomText(rng, 1 + rng() % 600);
    const std::string_view whole(text);
    const std::vector<std::string_view> want = splitCl100k(whole);
    for (size_t at = nextSafeCut(whole, 0); at < whole.size(); at = nextSafeCut(whole, at + 1)) {
      ASSERT_GT(at, 0u);
      ASSERT_EQ(whole[at - 1], '\n');
      const auto got = concat(splitCl100k(whole.substr(0, at)), splitCl100k(whole.substr(at)));
      ASSERT_EQ(got, want) << "cut at " << at << " of " << ::testing::PrintToString(text);
      ++cuts;
    }
  }
  EXPECT_GT(cuts, 1000u);
}

TEST(Cl100kSafeCut, RefusesCutsBeforeWhiteSpace) {
  // Ensures a newline followed by white space is no cut point: there, cutting would change the pieces.
  const std::string_view text = "a\n\nb";
  EXPECT_NE(concat(splitCl100k(text.substr(0, 2)), splitCl100k(text.substr(2))), splitCl100k(text));
  EXPECT_EQ(nextSafeCut(text, 0), 3u);
  EXPECT_EQ(nextSafeCut("a\n b", 0), 4u);
  EXPECT_EQ(nextSafeCut("a\n\u3000b", 0), std::string_view("a\n\u3000b").size());
  EXPECT_EQ(nextSafeCut("ab\n", 0), 3u);  // a newline at the end leaves nothing to cut off
  EXPECT_EQ(nextSafeCut("a\nb\nc", 3), 4u);
}

TEST(Cl100kSafeCut, EncodingAtACutGivesTheTokensOfTheWhole) {
  // Ensures tokens, not only pieces, concatenate at cut points.
  std::string error;
  const TiktokenTokenizer* tokenizer = testing::sharedCl100k(error);
  if (tokenizer == nullptr) GTEST_SKIP() << error;
  std::mt19937_64 rng(11);
  for (int round = 0; round < 100; ++round) {
    const std::string text = randomText(rng, 1 + rng() % 800);
    const std::string_view whole(text);
    const std::vector<uint32_t> want = encodeIds(*tokenizer, whole);
    for (size_t at = nextSafeCut(whole, 0); at < whole.size(); at = nextSafeCut(whole, at + 1)) {
      std::vector<uint32_t> got = encodeIds(*tokenizer, whole.substr(0, at));
      const std::vector<uint32_t> tail = encodeIds(*tokenizer, whole.substr(at));
      got.insert(got.end(), tail.begin(), tail.end());
      ASSERT_EQ(got, want) << "cut at " << at;
    }
  }
}

TEST(TiktokenSegmentCache, SameTokensAndTheResentPrefixHits) {
  // Ensures the segment cache changes no token, and that a conversation resent with a new turn finds every
  // segment of the old text but its last in the cache.
  std::string error;
  const TiktokenTokenizer* plain = testing::sharedCl100k(error);
  if (plain == nullptr) GTEST_SKIP() << error;
  auto loaded = TiktokenTokenizer::load(testing::cl100kPath());
  ASSERT_NE(loaded.tokenizer, nullptr) << loaded.error;
  TiktokenTokenizer& cached = *loaded.tokenizer;
  cached.enableSegmentCache(1 << 20);

  std::mt19937_64 rng(3);
  std::string conversation = randomText(rng, 30000);
  for (int turn = 0; turn < 6; ++turn) {
    const auto before = cached.cacheStats().value();
    const std::vector<uint32_t> got = encodeIds(cached, conversation);
    ASSERT_EQ(got, encodeIds(*plain, conversation)) << "turn " << turn;
    const auto after = cached.cacheStats().value();
    if (turn > 0) {
      EXPECT_GT(after.hits - before.hits, 3u) << "turn " << turn;
      EXPECT_LE(after.misses - before.misses, 2u) << "turn " << turn;
    }
    conversation += "\nuser: " + randomText(rng, 1 + rng() % 3000);
  }
  // The same text twice: the second time all hits, same tokens.
  const std::vector<uint32_t> first = encodeIds(cached, conversation);
  const auto before = cached.cacheStats().value();
  EXPECT_EQ(encodeIds(cached, conversation), first);
  EXPECT_EQ(first, encodeIds(*plain, conversation));
  EXPECT_EQ(cached.cacheStats()->misses, before.misses);
  EXPECT_GT(cached.cacheStats()->hits, before.hits);
}

TEST(TiktokenSegmentCache, ShortTextsBypassIt) {
  // Ensures a text of one segment or less is encoded directly (no lookups, nothing cached).
  auto loaded = TiktokenTokenizer::load(testing::cl100kPath());
  if (!loaded.tokenizer) GTEST_SKIP() << loaded.error;
  EXPECT_FALSE(loaded.tokenizer->cacheStats()) << "no counts while the cache is off";
  loaded.tokenizer->enableSegmentCache(1 << 20);
  std::vector<uint8_t> out;
  loaded.tokenizer->encode(std::string(TiktokenTokenizer::kSegmentBytes, 'a'), out);
  EXPECT_EQ(loaded.tokenizer->cacheStats()->misses, 0u);
  EXPECT_EQ(loaded.tokenizer->cacheStats()->hits, 0u);
}

}  // namespace
}  // namespace prefixgate::tokenize
