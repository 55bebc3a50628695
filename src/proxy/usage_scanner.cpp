#include "proxy/usage_scanner.h"

#include "proxy/head_scan.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace prefixgate::proxy {
namespace {
// The usage keys share their tail; llama.cpp's timings keys share another. Every tail begins with an underscore,
// so one pass over a text's underscores finds them all (UsageScanner::scan). The quote that opens each key is part
// of its head, so `"num_cached_tokens"` or `"prompt_tokens_details"` never match.
struct KeyFamily {
  std::string_view tail;
  std::array<std::string_view, 5> heads;  // "" = none
  std::array<size_t, 5> fields;           // heads[i] fills fields[i]
};
// One family per tail, so that matches are taken in the order of the text whatever the feeds' split (two families
// with one tail would each take their own last value, and which won would depend on the split).
constexpr KeyFamily kKeyFamilies[] = {
    // OpenAI's usage, and Anthropic's Messages usage (message_start, message_delta, a whole message).
    {"_tokens\"", {"\"completion", "\"prompt", "\"cached", "\"output", "\"input"}, {0, 1, 2, 0, 1}},
    {"_n\"", {"\"cache", "\"prompt", "", "", ""}, {3, 4, 0, 0, 0}},  // kCacheN, kPromptN
};
// The Responses API's event numbers: searched only in Responses bodies.
constexpr KeyFamily kSequenceFamily = {"_number\"", {"\"sequence", "", "", "", ""}, {5, 0, 0, 0, 0}};
constexpr std::string_view kEvent = "data: {";

// Calls `at(i)` for every i where text[i] is '_', in order: sixteen bytes at a time where SSE2 is there (a JSON
// answer has a few underscores in a few hundred bytes; a memchr per underscore cost more than the search).
template <class At>
void forEachUnderscore(std::string_view text, At at) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i underscore = _mm_set1_epi8('_');
  for (; i + 16 <= text.size(); i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(text.data() + i));
    for (auto mask = static_cast<unsigned>(_mm_movemask_epi8(_mm_cmpeq_epi8(x, underscore))); mask != 0;
         mask &= mask - 1)
      at(i + static_cast<size_t>(__builtin_ctz(mask)));
  }
#endif
  for (; i < text.size(); ++i)
    if (text[i] == '_') at(i);
}

// The key whose tail starts at `tail` in `text` (a tail of `family`): its field and number when one of the family's
// heads precedes the tail and a whole number follows it, and it counts here (see scan).
std::optional<KeyValue> keyAt(std::string_view text, size_t tail, const KeyFamily& family, size_t boundary,
                              bool straddling_only) {
  constexpr size_t kCarryBytes = UsageScanner::kCarryBytes;
  constexpr size_t kNoField = SIZE_MAX;
  size_t field = kNoField;
  std::string_view head;
  for (size_t f = 0; f < family.heads.size() && field == kNoField; ++f)
    if (!family.heads[f].empty() && tail >= family.heads[f].size() && text[tail - 1] == family.heads[f].back() &&
        text.substr(tail - family.heads[f].size(), family.heads[f].size()) == family.heads[f]) {
      field = family.fields[f];
      head = family.heads[f];
    }
  // Not one of the keys, or its head lies in the previous feed (then the boundary window finds it).
  if (field == kNoField) return std::nullopt;
  const size_t pos = tail - head.size();
  size_t i = tail + family.tail.size();
  while (i < text.size() && (text[i] == ' ' || text[i] == ':')) ++i;
  size_t end = i;
  uint64_t value = 0;
  bool overflow = false;
  for (; end < text.size() && text[end] >= '0' && text[end] <= '9'; ++end) {
    overflow |= __builtin_mul_overflow(value, 10, &value);
    overflow |= __builtin_add_overflow(value, static_cast<uint64_t>(text[end] - '0'), &value);
  }
  // The number must be complete: followed by a delimiter within this text (else a later feed completes it).
  if (end == i || end >= text.size()) return std::nullopt;
  // A match longer than the carry (a key padded with spaces, an overlong number) could not be found across a
  // split: it is ignored wherever it lies, so the result never depends on how the body was cut. A number beyond
  // 64 bits is no token count either.
  if (end - pos >= kCarryBytes || overflow) return std::nullopt;
  if (straddling_only && !(pos < boundary && end >= boundary)) return std::nullopt;
  return KeyValue{field, value};
}

}  // namespace

bool isJsonMediaType(std::string_view content_type) {
  constexpr std::string_view kJson = "application/json";
  // The usual value, exactly the name in some case: two words compared (a parsed value holds no control byte, the
  // only bytes other than 'A'-'Z' that the case bit could turn into one of the name's).
  if (content_type.size() == kJson.size()) return nameEqualsLower(content_type, kJson);
  content_type = content_type.substr(0, content_type.find(';'));
  while (!content_type.empty() && (content_type.front() == ' ' || content_type.front() == '\t'))
    content_type.remove_prefix(1);
  while (!content_type.empty() && (content_type.back() == ' ' || content_type.back() == '\t'))
    content_type.remove_suffix(1);
  return content_type.size() == kJson.size() &&
         std::equal(kJson.begin(), kJson.end(), content_type.begin(), [](char a, char b) {
           return a == (b >= 'A' && b <= 'Z' ? static_cast<char>(b - 'A' + 'a') : b);  // ASCII, no locale call
         });
}

void UsageScanner::feed(std::string_view bytes) {
  if (bytes.empty()) return;
  // Matches straddling the previous feed and this one: scan a small window around the boundary and count only
  // those that start before it and end after it. Then matches lying wholly in the new bytes.
  if (carry_size_ > 0) {
    std::array<char, 2 * kCarryBytes> window;
    const size_t head = std::min(bytes.size(), kCarryBytes);
    std::memcpy(window.data(), carry_.data(), carry_size_);
    std::memcpy(window.data() + carry_size_, bytes.data(), head);
    scan(std::string_view(window.data(), carry_size_ + head), carry_size_, true);
  }
  scan(bytes, 0, false);
  // Keep the last kCarryBytes of what was seen: the new bytes' tail, after what is left of the old carry.
  const size_t take = std::min(bytes.size(), kCarryBytes);
  const size_t keep = std::min(carry_size_, kCarryBytes - take);
  std::memmove(carry_.data(), carry_.data() + carry_size_ - keep, keep);
  std::memcpy(carry_.data() + keep, bytes.data() + bytes.size() - take, take);
  carry_size_ = keep + take;
}

void UsageScanner::scan(std::string_view text, size_t boundary, bool straddling_only) {
  // A match counts here when it ends at or after `boundary` and (for the boundary window) starts before it.
  for (size_t pos = events_counted_ ? text.find(kEvent) : std::string_view::npos; pos != std::string_view::npos;
       pos = text.find(kEvent, pos + 1)) {
    const size_t last = pos + kEvent.size() - 1;
    if (straddling_only && !(pos < boundary && last >= boundary)) continue;
    ++events_;
  }
  // Every key's tail begins with an underscore: one pass over the text's underscores finds the keys of every family,
  // in the text's order (a search per family would pass over the text once each).
  static_assert(kKeyFamilies[0].tail == "_tokens\"" && kKeyFamilies[1].tail == "_n\"" &&
                kSequenceFamily.tail == "_number\"");
  forEachUnderscore(text, [&](size_t u) {
    // The byte after the underscore tells the tails apart before any comparison (most underscores start none).
    const std::string_view rest = text.substr(u);
    if (rest.size() < 3) return;
    if (rest[1] == 't') {
      if (rest.size() >= 8 && std::memcmp(rest.data(), "_tokens\"", 8) == 0)
        take(keyAt(text, u, kKeyFamilies[0], boundary, straddling_only));
    } else if (rest[1] == 'n') {
      if (rest[2] == '"') take(keyAt(text, u, kKeyFamilies[1], boundary, straddling_only));
      else if (responses_ && rest.size() >= 8 && std::memcmp(rest.data(), "_number\"", 8) == 0)
        take(keyAt(text, u, kSequenceFamily, boundary, straddling_only));
    }
  });
}

void UsageScanner::take(std::optional<KeyValue> key) {
  if (!key) return;
  values_[key->field] = key->value;
  has_[key->field] = true;
}

}  // namespace prefixgate::proxy
