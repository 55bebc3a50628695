#pragma once
// The code point classes cl100k's split pattern distinguishes, and a forgiving UTF-8 decoder. The tables come
// from tools/tiktoken/gen_unicode_table.mjs and follow the Unicode version of the reference encoder (the npm
// tiktoken package), not the newest one, because token-for-token equality with it is the contract.
#include <cstddef>
#include <cstdint>

namespace prefixgate::tokenize {

// \p{L}, \p{N} and White_Space (the Rust regex crate's \s) are disjoint, so one class per code point suffices.
enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

namespace detail {

struct CodePointRange {
  char32_t first;
  char32_t last;  // inclusive
  CharClass char_class;
};

// Sorted, non-overlapping; code points outside every range are kOther. Defined in unicode_tables.cpp.
extern const CodePointRange kCodePointRanges[];
extern const size_t kCodePointRangeCount;

CharClass classifyNonAscii(char32_t cp);

// ASCII classes, spelled out so the hot path needs no table search.
inline constexpr CharClass kAsciiClasses[128] = {
    // 0x00-0x08 controls, 0x09-0x0D \t \n \v \f \r, 0x0E-0x1F controls
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kSpace,
    CharClass::kSpace, CharClass::kSpace, CharClass::kSpace, CharClass::kSpace, CharClass::kOther,
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther,
    // 0x20 space, 0x21-0x2F punctuation
    CharClass::kSpace, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther,
    // 0x30-0x39 digits, 0x3A-0x40 punctuation
    CharClass::kNumber, CharClass::kNumber, CharClass::kNumber, CharClass::kNumber, CharClass::kNumber,
    CharClass::kNumber, CharClass::kNumber, CharClass::kNumber, CharClass::kNumber, CharClass::kNumber,
    CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther,
    // 0x41-0x5A A-Z, 0x5B-0x60 punctuation
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther, CharClass::kOther,
    // 0x61-0x7A a-z, 0x7B-0x7F punctuation and DEL
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter, CharClass::kLetter,
    CharClass::kLetter, CharClass::kOther, CharClass::kOther, CharClass::kOther, CharClass::kOther,
    CharClass::kOther};

}  // namespace detail

inline CharClass classifyCodePoint(char32_t cp) {
  return cp < 0x80 ? detail::kAsciiClasses[cp] : detail::classifyNonAscii(cp);
}

// Stands for a byte that does not start a valid UTF-8 sequence; it classifies as kOther.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

// Decodes the code point at p (p < end) into cp and returns its length in bytes (1-4). An invalid or truncated
// sequence yields kInvalidCodePoint with length 1, so every byte of any input is consumed exactly once.
size_t decodeUtf8(const uint8_t* p, const uint8_t* end, char32_t& cp);

}  // namespace prefixgate::tokenize
