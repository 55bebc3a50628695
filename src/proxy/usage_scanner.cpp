#include "proxy/usage_scanner.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <span>

namespace prefixgate::proxy {
namespace {
// The usage keys share their tail, so one search finds them all; llama.cpp's timings keys share another. The
// quote that opens each key is part of its head, so `"num_cached_tokens"` or `"prompt_tokens_details"` never match.
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
}  // namespace

bool isJsonMediaType(std::string_view content_type) {
  content_type = content_type.substr(0, content_type.find(';'));
  while (!content_type.empty() && (content_type.front() == ' ' || content_type.front() == '\t'))
    content_type.remove_prefix(1);
  while (!content_type.empty() && (content_type.back() == ' ' || content_type.back() == '\t'))
    content_type.remove_suffix(1);
  constexpr std::string_view kJson = "application/json";
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
  for (const KeyFamily& family : kKeyFamilies) scanKeys(text, boundary, straddling_only, family.tail, family.heads,
                                                         family.fields);
  if (responses_)
    scanKeys(text, boundary, straddling_only, kSequenceFamily.tail, kSequenceFamily.heads, kSequenceFamily.fields);
}

void UsageScanner::scanKeys(std::string_view text, size_t boundary, bool straddling_only, std::string_view key_tail,
                            std::span<const std::string_view> key_heads, std::span<const size_t> key_fields) {
  for (size_t tail = text.find(key_tail); tail != std::string_view::npos; tail = text.find(key_tail, tail + 1)) {
    size_t field = kFields;
    std::string_view head;
    for (size_t f = 0; f < key_heads.size() && field == kFields; ++f)
      if (!key_heads[f].empty() && tail >= key_heads[f].size() &&
          text.substr(tail - key_heads[f].size(), key_heads[f].size()) == key_heads[f]) {
        field = key_fields[f];
        head = key_heads[f];
      }
    // Not one of the keys, or its head lies in the previous feed (then the boundary window finds it).
    if (field == kFields) continue;
    const size_t pos = tail - head.size();
    size_t i = tail + key_tail.size();
    while (i < text.size() && (text[i] == ' ' || text[i] == ':')) ++i;
    size_t end = i;
    uint64_t value = 0;
    bool overflow = false;
    for (; end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])); ++end) {
      overflow |= __builtin_mul_overflow(value, 10, &value);
      overflow |= __builtin_add_overflow(value, static_cast<uint64_t>(text[end] - '0'), &value);
    }
    // The number must be complete: followed by a delimiter within this text (else a later feed completes it).
    if (end == i || end >= text.size()) continue;
    // A match longer than the carry (a key padded with spaces, an overlong number) could not be found across a
    // split: it is ignored wherever it lies, so the result never depends on how the body was cut. A number beyond
    // 64 bits is no token count either.
    if (end - pos >= kCarryBytes || overflow) continue;
    if (straddling_only && !(pos < boundary && end >= boundary)) continue;
    values_[field] = value;
    has_[field] = true;
  }
}

}  // namespace prefixgate::proxy
