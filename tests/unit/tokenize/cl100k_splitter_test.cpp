// The cl100k pre-tokenizer's piece boundaries on the cases where the regex's backtracking is subtle, written by
// hand from the pattern (the corpus and differential tests then check the whole encoder against tiktoken).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenize/cl100k_splitter.h"
#include "tokenize/unicode_class.h"

namespace prefixgate::tokenize {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : splitCl100k(text)) out.emplace_back(p);
  return out;
}
using Pieces = std::vector<std::string>;

TEST(Cl100kSplitter, WordsTakeOneLeadingSpaceOrPunctuation) {
  // Ensures [^\r\n\p{L}\p{N}]?\p{L}+: one space, tab, NBSP or punctuation mark joins the word after it.
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("\tfoo .bar"), (Pieces{"\tfoo", " .", "bar"}));  // " ." is a punctuation run
  EXPECT_EQ(pieces("\xC2\xA0word"), (Pieces{"\xC2\xA0word"}));  // NBSP
  EXPECT_EQ(pieces("\n\nfoo"), (Pieces{"\n\n", "foo"}));     // but never a newline
  EXPECT_EQ(pieces("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E!"), (Pieces{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E", "!"}));
}

TEST(Cl100kSplitter, ContractionsAreCaseInsensitiveAndComeFirst) {
  // Ensures (?i:'s|'t|'re|'ve|'m|'ll|'d) wins at an apostrophe, in any case, even before more letters.
  EXPECT_EQ(pieces("I'LL don't"), (Pieces{"I", "'LL", " don", "'t"}));
  EXPECT_EQ(pieces("we'Re they'VE it'S"), (Pieces{"we", "'Re", " they", "'VE", " it", "'S"}));
  EXPECT_EQ(pieces("'sup"), (Pieces{"'s", "up"}));
  EXPECT_EQ(pieces("'x"), (Pieces{"'x"}));    // not a contraction: punctuation + word
  EXPECT_EQ(pieces("'l"), (Pieces{"'l"}));    // 'l alone is not 'll
  EXPECT_EQ(pieces(" 's"), (Pieces{" '", "s"}));  // the space makes it " ?[^\s\p{L}\p{N}]+"
  EXPECT_EQ(pieces("'\xC5\xBF"), (Pieces{"'\xC5\xBF"}));  // long s folds to s
}

TEST(Cl100kSplitter, NumbersSplitIntoChunksOfThree) {
  // Ensures \p{N}{1,3}, for any Unicode number, and that digits never take a leading space.
  EXPECT_EQ(pieces("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(pieces("abc1234def"), (Pieces{"abc", "123", "4", "def"}));
  EXPECT_EQ(pieces(" 1"), (Pieces{" ", "1"}));
  EXPECT_EQ(pieces("$100"), (Pieces{"$", "100"}));
  EXPECT_EQ(pieces("\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"), (Pieces{"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"}));  // ١٢٣٤
}

TEST(Cl100kSplitter, PunctuationRunsTakeTrailingNewlines) {
  // Ensures " ?[^\s\p{L}\p{N}]+[\r\n]*": one literal space (not a tab) may lead; newlines after it join.
  EXPECT_EQ(pieces(" !!!\n\nx"), (Pieces{" !!!\n\n", "x"}));
  EXPECT_EQ(pieces("!!!\r\n"), (Pieces{"!!!\r\n"}));
  EXPECT_EQ(pieces("\t!"), (Pieces{"\t", "!"}));
  EXPECT_EQ(pieces("a.'s"), (Pieces{"a", ".'", "s"}));
  EXPECT_EQ(pieces("a\xCC\x81"), (Pieces{"a", "\xCC\x81"}));  // a combining mark is not a letter
}

TEST(Cl100kSplitter, WhiteSpaceRunsBackOffBeforeAWord) {
  // Ensures \s+(?!\S): a run gives its last character to the next piece, unless it ends the text.
  EXPECT_EQ(pieces("   word"), (Pieces{"  ", " word"}));
  EXPECT_EQ(pieces("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(pieces("a \t b"), (Pieces{"a", " \t", " b"}));
  EXPECT_EQ(pieces("  1"), (Pieces{" ", " ", "1"}));  // the space left over cannot join a number
  EXPECT_EQ(pieces("\t\t!"), (Pieces{"\t", "\t", "!"}));
  EXPECT_EQ(pieces("  !"), (Pieces{" ", " !"}));
}

TEST(Cl100kSplitter, NewlinesEndTheWhiteSpaceBeforeThem) {
  // Ensures \s*[\r\n]+: a white-space run that holds newlines is cut after its last newline.
  EXPECT_EQ(pieces("a  \n  b"), (Pieces{"a", "  \n", " ", " b"}));
  EXPECT_EQ(pieces("\r\n"), (Pieces{"\r\n"}));
  EXPECT_EQ(pieces(" \n"), (Pieces{" \n"}));
  EXPECT_EQ(pieces("\n \n x"), (Pieces{"\n \n", " x"}));
  EXPECT_EQ(pieces("\n   "), (Pieces{"\n", "   "}));
}

TEST(Cl100kSplitter, CoversEveryByteEvenInvalidUtf8) {
  // Ensures the pieces concatenate back to the input, with invalid bytes behaving as punctuation.
  EXPECT_EQ(pieces(""), Pieces{});
  EXPECT_EQ(pieces("\xFF" "abc"), (Pieces{"\xFF" "abc"}));
  EXPECT_EQ(pieces("ab\xC3"), (Pieces{"ab", "\xC3"}));
  static constexpr char kText[] = "x \xED\xA0\x80 y\xF0\x9F\x98 \xC0\xAF\n";
  const std::string text(kText, sizeof(kText) - 1);
  std::string joined;
  for (std::string_view p : splitCl100k(text)) joined += p;
  EXPECT_EQ(joined, text);
}

TEST(UnicodeClass, FollowsTheReferenceEncodersUnicode) {
  // Ensures the classes the generated table gives, including White_Space rather than JavaScript's \s.
  EXPECT_EQ(classifyCodePoint(U'a'), CharClass::kLetter);
  EXPECT_EQ(classifyCodePoint(U'7'), CharClass::kNumber);
  EXPECT_EQ(classifyCodePoint(U'\t'), CharClass::kSpace);
  EXPECT_EQ(classifyCodePoint(U'_'), CharClass::kOther);
  EXPECT_EQ(classifyCodePoint(0x0085), CharClass::kSpace);   // NEL is White_Space
  EXPECT_EQ(classifyCodePoint(0xFEFF), CharClass::kOther);   // BOM is not
  EXPECT_EQ(classifyCodePoint(0x3000), CharClass::kSpace);
  EXPECT_EQ(classifyCodePoint(0x4E00), CharClass::kLetter);
  EXPECT_EQ(classifyCodePoint(0x0661), CharClass::kNumber);
  EXPECT_EQ(classifyCodePoint(0x2162), CharClass::kNumber);  // Roman numeral (Nl)
  EXPECT_EQ(classifyCodePoint(0x0301), CharClass::kOther);   // combining mark (Mn)
  EXPECT_EQ(classifyCodePoint(0x1F600), CharClass::kOther);  // emoji
  EXPECT_EQ(classifyCodePoint(0x1CCF0), CharClass::kNumber); // Unicode 16 digit: the reference knows it
  EXPECT_EQ(classifyCodePoint(0x10FFFF), CharClass::kOther);
}

TEST(UnicodeClass, DecodeUtf8RejectsMalformedSequences) {
  // Ensures overlong forms, surrogates, truncation and stray continuation bytes decode as one invalid byte.
  auto decode = [](std::string_view s, char32_t& cp) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    return decodeUtf8(p, p + s.size(), cp);
  };
  char32_t cp = 0;
  EXPECT_EQ(decode("\xE2\x82\xAC", cp), 3u);
  EXPECT_EQ(cp, 0x20ACu);
  EXPECT_EQ(decode("\xF0\x9F\x98\x80", cp), 4u);
  EXPECT_EQ(cp, 0x1F600u);
  for (std::string_view bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xE2\x82", "\x80"}) {
    EXPECT_EQ(decode(bad, cp), 1u);
    EXPECT_EQ(cp, kInvalidCodePoint);
  }
}

}  // namespace
}  // namespace prefixgate::tokenize
