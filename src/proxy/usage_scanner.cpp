#include "proxy/usage_scanner.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

namespace prefixgate::proxy {
namespace {
// The three keys share their tail, so one search finds them all (the cost of the single key it replaced); the
// quote that opens each key is part of its head, so `"num_cached_tokens"` or `"prompt_tokens_details"` never match.
constexpr std::string_view kKeyTail = "_tokens\"";
constexpr std::array<std::string_view, 3> kKeyHeads = {"\"completion", "\"prompt", "\"cached"};  // by Field
constexpr std::string_view kEvent = "data: {";
}  // namespace

void UsageScanner::feed(std::string_view bytes) {
  if (bytes.empty()) return;
  // Matches straddling the previous feed and this one: scan a small window around the boundary and count only
  // those that start before it and end after it. Then matches lying wholly in the new bytes.
  if (!carry_.empty()) {
    std::array<char, 2 * kCarryBytes> window;
    const size_t head = std::min(bytes.size(), kCarryBytes);
    std::memcpy(window.data(), carry_.data(), carry_.size());
    std::memcpy(window.data() + carry_.size(), bytes.data(), head);
    scan(std::string_view(window.data(), carry_.size() + head), carry_.size(), true);
  }
  scan(bytes, 0, false);
  if (bytes.size() >= kCarryBytes) {
    carry_.assign(bytes.substr(bytes.size() - kCarryBytes));
  } else {
    carry_.append(bytes);
    if (carry_.size() > kCarryBytes) carry_.erase(0, carry_.size() - kCarryBytes);
  }
}

void UsageScanner::scan(std::string_view text, size_t boundary, bool straddling_only) {
  // A match counts here when it ends at or after `boundary` and (for the boundary window) starts before it.
  for (size_t pos = text.find(kEvent); pos != std::string_view::npos; pos = text.find(kEvent, pos + 1)) {
    const size_t last = pos + kEvent.size() - 1;
    if (straddling_only && !(pos < boundary && last >= boundary)) continue;
    ++events_;
  }
  for (size_t tail = text.find(kKeyTail); tail != std::string_view::npos; tail = text.find(kKeyTail, tail + 1)) {
    size_t field = kFields;
    for (size_t f = 0; f < kKeyHeads.size() && field == kFields; ++f)
      if (tail >= kKeyHeads[f].size() && text.substr(tail - kKeyHeads[f].size(), kKeyHeads[f].size()) == kKeyHeads[f])
        field = f;
    // Not one of the keys, or its head lies in the previous feed (then the boundary window finds it).
    if (field == kFields) continue;
    const size_t pos = tail - kKeyHeads[field].size();
    size_t i = tail + kKeyTail.size();
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
