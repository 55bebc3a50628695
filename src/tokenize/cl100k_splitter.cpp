#include "tokenize/cl100k_splitter.h"

#include <cstdint>
#include <cstring>

#include "tokenize/unicode_class.h"

namespace prefixgate::tokenize {
namespace {

struct CodePoint {
  char32_t value;
  CharClass char_class;
  size_t length;  // in bytes
};

// Callers guarantee p < end.
inline CodePoint peek(const uint8_t* p, const uint8_t* end) {
  if (*p < 0x80) return {*p, detail::kAsciiClasses[*p], 1};
  char32_t cp = 0;
  const size_t length = decodeUtf8(p, end, cp);
  const CharClass c = cp == kInvalidCodePoint ? CharClass::kOther : detail::classifyNonAscii(cp);
  return {cp, c, length};
}

inline bool isNewline(char32_t cp) { return cp == '\r' || cp == '\n'; }

// Returns the end of the run of code points of class c that starts at p.
inline const uint8_t* skipClass(const uint8_t* p, const uint8_t* end, CharClass c) {
  while (p < end) {
    if (*p < 0x80) {  // ASCII dominates real prompts; skip the decoder for it
      if (detail::kAsciiClasses[*p] != c) break;
      ++p;
      continue;
    }
    const CodePoint cp = peek(p, end);
    if (cp.char_class != c) break;
    p += cp.length;
  }
  return p;
}

inline const uint8_t* skipNewlines(const uint8_t* p, const uint8_t* end) {
  while (p < end && (*p == '\r' || *p == '\n')) ++p;
  return p;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at p (where *p == '\''): the match length in bytes, or 0. Case-insensitive
// matching in the Rust regex crate uses Unicode simple case folding, under which U+017F (long s) equals 's'.
size_t contractionLength(const uint8_t* p, const uint8_t* end) {
  const size_t avail = static_cast<size_t>(end - p);
  if (avail < 2) return 0;
  if (p[1] == 0xC5 && avail >= 3 && p[2] == 0xBF) return 3;  // 'ſ
  // OR-ing 0x20 lower-cases ASCII letters and maps no other byte onto the letters tested here.
  const uint8_t c1 = p[1] | 0x20;
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (avail < 3) return 0;
  const uint8_t c2 = p[2] | 0x20;
  if ((c1 == 'r' || c1 == 'v') && c2 == 'e') return 3;
  if (c1 == 'l' && c2 == 'l') return 3;
  return 0;
}

// The alternatives that start with white space: [^\r\n\p{L}\p{N}]?\p{L}+ and " ?[^\s\p{L}\p{N}]+[\r\n]*" (a
// space or tab before a word or punctuation joins it), then \s*[\r\n]+, \s+(?!\S) and \s+.
const uint8_t* scanSpace(const CodePoint& c0, const uint8_t* p, const uint8_t* end) {
  const uint8_t* p1 = p + c0.length;
  if (!isNewline(c0.value) && p1 < end) {
    const CodePoint c1 = peek(p1, end);
    if (c1.char_class == CharClass::kLetter) return skipClass(p1 + c1.length, end, CharClass::kLetter);
    if (c0.value == ' ' && c1.char_class == CharClass::kOther) {
      return skipNewlines(skipClass(p1 + c1.length, end, CharClass::kOther), end);
    }
  }
  // Scan the whole white-space run once, remembering where its last newline ends and where its last code
  // point starts.
  const uint8_t* last_newline_end = isNewline(c0.value) ? p1 : nullptr;
  const uint8_t* last_start = p;
  const uint8_t* q = p1;
  while (q < end) {
    const CodePoint c = peek(q, end);
    if (c.char_class != CharClass::kSpace) break;
    last_start = q;
    q += c.length;
    if (isNewline(c.value)) last_newline_end = q;
  }
  // \s*[\r\n]+ backtracks from the end of the run to its last newline.
  if (last_newline_end != nullptr) return last_newline_end;
  if (q == end) return q;
  // \s+(?!\S) gives back the last white-space code point so that it can prefix the word that follows; a single
  // one cannot be given back and is taken alone by \s+.
  return last_start > p ? last_start : q;
}

const uint8_t* scanPiece(const uint8_t* p, const uint8_t* end) {
  const CodePoint c0 = peek(p, end);
  if (c0.value == '\'') {
    const size_t n = contractionLength(p, end);
    if (n != 0) return p + n;
  }
  const uint8_t* p1 = p + c0.length;
  switch (c0.char_class) {
    case CharClass::kLetter:
      return skipClass(p1, end, CharClass::kLetter);
    case CharClass::kNumber: {
      const uint8_t* q = p1;
      for (int taken = 1; taken < 3 && q < end; ++taken) {  // \p{N}{1,3}
        const CodePoint c = peek(q, end);
        if (c.char_class != CharClass::kNumber) break;
        q += c.length;
      }
      return q;
    }
    case CharClass::kOther:
      if (p1 < end) {
        const CodePoint c1 = peek(p1, end);
        if (c1.char_class == CharClass::kLetter) return skipClass(p1 + c1.length, end, CharClass::kLetter);
      }
      return skipNewlines(skipClass(p1, end, CharClass::kOther), end);
    case CharClass::kSpace:
      break;
  }
  return scanSpace(c0, p, end);
}

}  // namespace

bool Cl100kSplitter::next(std::string_view& piece) {
  if (pos_ >= text_.size()) return false;
  const auto* base = reinterpret_cast<const uint8_t*>(text_.data());
  const uint8_t* start = base + pos_;
  const uint8_t* stop = scanPiece(start, base + text_.size());
  piece = text_.substr(pos_, static_cast<size_t>(stop - start));
  pos_ = static_cast<size_t>(stop - base);
  return true;
}

size_t nextSafeCut(std::string_view text, size_t from) {
  const auto* base = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t* end = base + text.size();
  for (size_t at = from == 0 ? 0 : from - 1; at + 1 < text.size(); ++at) {
    const void* found = std::memchr(base + at, '\n', text.size() - 1 - at);
    if (found == nullptr) break;
    at = static_cast<size_t>(static_cast<const uint8_t*>(found) - base);
    if (peek(base + at + 1, end).char_class != CharClass::kSpace) return at + 1;
  }
  return text.size();
}

std::vector<std::string_view> splitCl100k(std::string_view text) {
  std::vector<std::string_view> pieces;
  Cl100kSplitter splitter(text);
  std::string_view piece;
  while (splitter.next(piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace prefixgate::tokenize
