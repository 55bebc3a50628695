#pragma once
// The byte scans shared by the direct readers of HTTP/1.1 heads (proxy/response_parser.h for an engine's response,
// server/request_parser.h for a client's request): each reads a whole, plain head in one pass and leaves every other
// head to Beast's parser, so these accept only bytes that Beast's parser accepts in the same place.
#include <array>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstdint>
#include <string_view>

namespace prefixgate::proxy {

// RFC 9110's tchar: the bytes of a field name or a method (Beast's parser accepts the same).
inline constexpr std::array<bool, 256> kTokenChar = [] {
  std::array<bool, 256> t{};
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) t[c] = t[c - 'a' + 'A'] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) t[static_cast<unsigned char>(c)] = true;
  return t;
}();

inline bool isDigit(char c) { return c >= '0' && c <= '9'; }

inline uint64_t load8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// The first byte in [p, end) at or below `highest` (unsigned) or DEL; `end` when there is none. Sixteen bytes at a
// time where SSE2 is there.
inline const char* firstAtMostOrDel(const char* p, const char* end, unsigned char highest) {
#if defined(__SSE2__)
  const __m128i top = _mm_set1_epi8(static_cast<char>(highest));
  const __m128i del = _mm_set1_epi8(0x7F);
  while (end - p >= 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    // x <= highest (unsigned) exactly when min(x, highest) == x.
    const __m128i bad = _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(x, top), x), _mm_cmpeq_epi8(x, del));
    if (const int mask = _mm_movemask_epi8(bad)) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  for (; p < end; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c <= highest || c == 0x7F) return p;
  }
  return end;
}

// The first byte in [p, end) that a field value or reason phrase may not hold as it is: a control character (HTAB
// included: the caller allows it) or DEL; `end` when there is none.
inline const char* firstControl(const char* p, const char* end) { return firstAtMostOrDel(p, end, 0x1F); }

// The end of a request target at `p` (Beast's target bytes: anything but control characters, SP and DEL): the first
// byte in [p, end) that is not one; `end` when there is none.
inline const char* targetEnd(const char* p, const char* end) { return firstAtMostOrDel(p, end, 0x20); }

// The CR that ends a line of value bytes (HTAB, SP, visible ASCII, obs-text) starting at `p`, when it is followed by
// LF and one more byte before `end` (Beast looks one byte past a line for a folded continuation); nullptr otherwise.
inline const char* valueLineEnd(const char* p, const char* end) {
  for (;;) {
    p = firstControl(p, end);
    if (p == end) return nullptr;
    if (*p != '\t') break;
    ++p;
  }
  return *p == '\r' && end - p >= 3 && p[1] == '\n' ? p : nullptr;
}

// True when `value` is a single token (no list, no spaces): the only Connection value the direct readers take.
inline bool isOneToken(std::string_view value) {
  if (value.empty()) return false;
  for (char c : value)
    if (!kTokenChar[static_cast<unsigned char>(c)]) return false;
  return true;
}

// Whether `name` (token characters, 8 to 16 bytes) equals `lowercase` (lowercase letters, digits and '-', the same
// size) ignoring ASCII case: two overlapping 8-byte words, each with 0x20 set in every byte. Among token characters
// only 'A'-'Z' become another token character that way (their lowercase), and '-' and digits stay as they are.
inline bool nameEqualsLower(std::string_view name, std::string_view lowercase) {
  constexpr uint64_t kCaseBits = 0x2020202020202020ULL;
  const size_t tail = name.size() - 8;
  return ((load8(name.data()) | kCaseBits) == load8(lowercase.data())) &&
         ((load8(name.data() + tail) | kCaseBits) == load8(lowercase.data() + tail));
}

// nameEqualsLower for a 4-byte name ("host").
inline bool name4EqualsLower(std::string_view name, const char (&lowercase)[5]) {
  uint32_t a, b;
  std::memcpy(&a, name.data(), 4);
  std::memcpy(&b, lowercase, 4);
  return (a | 0x20202020U) == b;
}

// One field line of a head, read directly: `field-name ":" OWS field-value OWS CRLF`, its name token characters,
// its value no control byte but HTAB, and the next line not a folded continuation (its first byte is there).
struct FieldLine {
  std::string_view name;
  std::string_view value;  // without the optional whitespace around it
};
// Reads the field line at `q` (before `end`) into `line`: returns the byte after its CRLF, or nullptr when the line
// is not plain or not whole before `end` (the caller leaves the head to Beast's parser).
inline const char* readFieldLine(const char* q, const char* end, FieldLine& line) {
  const char* const name = q;
  while (q < end && kTokenChar[static_cast<unsigned char>(*q)]) ++q;
  if (q == name || q == end || *q != ':') return nullptr;
  line.name = std::string_view(name, q - name);
  ++q;
  while (q < end && (*q == ' ' || *q == '\t')) ++q;
  const char* const value = q;
  q = valueLineEnd(q, end);
  if (q == nullptr || q[2] == ' ' || q[2] == '\t') return nullptr;
  const char* value_end = q;
  while (value_end != value && (value_end[-1] == ' ' || value_end[-1] == '\t')) --value_end;
  line.value = std::string_view(value, value_end - value);
  return q + 2;
}

// A plain decimal Content-Length (1 to 19 digits, nothing else) into `length`; false for any other form.
inline bool plainLength(std::string_view value, uint64_t& length) {
  if (value.empty() || value.size() > 19) return false;
  uint64_t v = 0;
  for (char c : value) {
    if (!isDigit(c)) return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  length = v;
  return true;
}

}  // namespace prefixgate::proxy
