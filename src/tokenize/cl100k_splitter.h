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

// The first position p >= from, 0 < p < text.size(), where the text can be cut so that splitting text[0, p) and
// text[p, end) apart gives exactly the pieces of the whole: just after a '\n' that is followed by a code point that
// is not white space. Returns text.size() when there is none. Why it is safe: a piece that holds that '\n' is
// either punctuation with trailing newlines or a white-space run holding a newline, and both end at the run's last
// newline, so a piece ends there in the whole text and in the cut prefix alike; every earlier piece looks at most
// one code point past its end, which the prefix still holds; and the pattern has no look-behind, so the suffix's
// pieces start afresh exactly as in the whole text.
size_t nextSafeCut(std::string_view text, size_t from);

// All pieces of text, for tests and tools; the encoder uses Cl100kSplitter directly.
std::vector<std::string_view> splitCl100k(std::string_view text);

}  // namespace prefixgate::tokenize
