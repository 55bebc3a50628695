// The character tokenizer and the token-id packing that every id-based tokenizer shares.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenize/tokenizer.h"

namespace prefixgate::tokenize {
namespace {

TEST(CharacterTokenizer, EncodesUtf8BytesUnchangedAndAppends) {
  // Ensures the buffer is the text's bytes, appended after what out already holds.
  CharacterTokenizer tokenizer;
  std::vector<uint8_t> out{0xAA};
  const std::string text = "h\xC3\xA9 \xE2\x9C\x93\n";  // "hé ✓\n"
  tokenizer.encode(text, out);
  std::vector<uint8_t> expected{0xAA};
  expected.insert(expected.end(), text.begin(), text.end());
  EXPECT_EQ(out, expected);
  EXPECT_EQ(tokenizer.tokenCount(std::span<const uint8_t>(out).subspan(1)), text.size());
  EXPECT_EQ(tokenizer.name(), "character");
}

TEST(CharacterTokenizer, EmptyTextAndInvalidUtf8) {
  // Ensures empty text adds nothing and invalid UTF-8 passes through byte for byte.
  CharacterTokenizer tokenizer;
  std::vector<uint8_t> out;
  tokenizer.encode("", out);
  EXPECT_TRUE(out.empty());
  tokenizer.encode(std::string_view("\xFF\x80\xC3", 3), out);
  EXPECT_EQ(out, (std::vector<uint8_t>{0xFF, 0x80, 0xC3}));
}

TEST(PackTokenIds, FourBytesBigEndianEach) {
  // Ensures ids pack as AIBrix packs them: big-endian uint32, appended.
  std::vector<uint8_t> out{0x01};
  const std::vector<uint32_t> ids{0x00000000u, 0x01020304u, 0xFFFFFFFFu, 100257u};
  packTokenIds(ids, out);
  EXPECT_EQ(out, (std::vector<uint8_t>{0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0xFF, 0xFF, 0xFF,
                                       0xFF, 0x00, 0x01, 0x87, 0xA1}));
  packTokenIds({}, out);
  EXPECT_EQ(out.size(), 17u);
}

}  // namespace
}  // namespace prefixgate::tokenize

namespace prefixgate::tokenize {
namespace {

// encodeView gives the same bytes as encode; the character tokenizer's view is the text itself (no copy), while
// the default (used by tiktoken) encodes into the scratch buffer.
TEST(CharacterTokenizer, EncodeViewIsTheTextWithoutACopy) {
  CharacterTokenizer tokenizer;
  const std::string text = "prefix caching, h\xC3\xA9";
  std::vector<uint8_t> scratch{9, 9};
  auto view = tokenizer.encodeView(text, scratch);
  std::vector<uint8_t> encoded;
  tokenizer.encode(text, encoded);
  EXPECT_EQ(std::vector<uint8_t>(view.begin(), view.end()), encoded);
  EXPECT_EQ(static_cast<const void*>(view.data()), static_cast<const void*>(text.data()));
  EXPECT_EQ(scratch, (std::vector<uint8_t>{9, 9}));  // untouched
}

}  // namespace
}  // namespace prefixgate::tokenize
