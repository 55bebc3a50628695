#pragma once
// cl100k_base's pre-tokenizer: splits text into the pieces that byte-pair encoding then runs on, exactly as the
// regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// would with leftmost-first alternation, but as a hand-written scan over code points: no regex engine, no
// allocation, and no backtracking beyond one code point.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::tokenize {

// The pattern above, as tiktoken's cl100k_base.json spells it (checked at load: the splitter implements no other).
inline constexpr std::string_view kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Walks the pieces of one text. Not thread-safe (it is a cursor); cheap to create, one per encode call.
// The pieces cover the text exactly, in order. Invalid UTF-8 bytes are treated as single "other" characters
// (like punctuation), so any byte string splits without error.
class Cl100kSplitter {
 public:
  explicit Cl100kSplitter(std::string_view text) : text_(text) {}

  // Sets piece to the next piece and returns true, or returns false at the end of the text.
  bool next(std::string_view& piece);

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

// All pieces of text, for tests and tools; the encoder uses Cl100kSplitter directly.
std::vector<std::string_view> splitCl100k(std::string_view text);

}  // namespace prefixgate::tokenize
