#include "tokenize/unicode_class.h"

#include <algorithm>

namespace prefixgate::tokenize {
namespace detail {
namespace {

CharClass searchRanges(char32_t cp) {
  const CodePointRange* begin = kCodePointRanges;
  const CodePointRange* end = kCodePointRanges + kCodePointRangeCount;
  // The first range that ends at or after cp is the only one that can hold it.
  const CodePointRange* it =
      std::lower_bound(begin, end, cp, [](const CodePointRange& r, char32_t v) { return r.last < v; });
  return (it != end && it->first <= cp) ? it->char_class : CharClass::kOther;
}

// The Basic Multilingual Plane (CJK, Hangul, kana, Cyrillic, ...: nearly all non-ASCII text) as a flat table, so
// that its code points cost one load instead of a binary search over the ranges. Built during static
// initialisation, which may read kCodePointRanges: it is constant-initialised, hence ready before any of that.
struct BmpClasses {
  CharClass classes[0x10000];
  BmpClasses() {
    for (char32_t cp = 0; cp < 0x10000; ++cp) classes[cp] = searchRanges(cp);
  }
};
const BmpClasses kBmp;

}  // namespace

CharClass classifyNonAscii(char32_t cp) { return cp < 0x10000 ? kBmp.classes[cp] : searchRanges(cp); }

}  // namespace detail

size_t decodeUtf8(const uint8_t* p, const uint8_t* end, char32_t& cp) {
  const uint8_t b0 = p[0];
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  const size_t avail = static_cast<size_t>(end - p);
  auto cont = [&](size_t i) { return i < avail && (p[i] & 0xC0) == 0x80; };
  // Overlong forms, surrogates and values past U+10FFFF are rejected as in any strict decoder, so a valid
  // sequence always means the code point JavaScript (the reference) would have seen.
  if (b0 >= 0xC2 && b0 <= 0xDF && cont(1)) {
    cp = (char32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (b0 >= 0xE0 && b0 <= 0xEF && cont(1) && cont(2)) {
    const char32_t v = (char32_t(b0 & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    if (v >= 0x800 && (v < 0xD800 || v > 0xDFFF)) {
      cp = v;
      return 3;
    }
  } else if (b0 >= 0xF0 && b0 <= 0xF4 && cont(1) && cont(2) && cont(3)) {
    const char32_t v = (char32_t(b0 & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
                       (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    if (v >= 0x10000 && v <= 0x10FFFF) {
      cp = v;
      return 4;
    }
  }
  cp = kInvalidCodePoint;
  return 1;
}

}  // namespace prefixgate::tokenize
