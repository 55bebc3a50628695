#include "proxy/output_tokens.h"

#include <array>
#include <cctype>
#include <cstring>

namespace prefixgate::proxy {
namespace {
constexpr std::string_view kUsageKey = "\"completion_tokens\"";
constexpr std::string_view kEvent = "data: {";
}  // namespace

void OutputTokenCounter::feed(std::string_view bytes) {
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

void OutputTokenCounter::scan(std::string_view text, size_t boundary, bool straddling_only) {
  // A match counts here when it ends at or after `boundary` and (for the boundary window) starts before it.
  for (size_t pos = text.find(kEvent); pos != std::string_view::npos; pos = text.find(kEvent, pos + 1)) {
    const size_t last = pos + kEvent.size() - 1;
    if (straddling_only && !(pos < boundary && last >= boundary)) continue;
    ++events_;
  }
  for (size_t pos = text.find(kUsageKey); pos != std::string_view::npos; pos = text.find(kUsageKey, pos + 1)) {
    size_t i = pos + kUsageKey.size();
    while (i < text.size() && (text[i] == ' ' || text[i] == ':')) ++i;
    size_t end = i;
    uint64_t value = 0;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])))
      value = value * 10 + static_cast<uint64_t>(text[end++] - '0');
    // The number must be complete: followed by a delimiter within this text (else a later feed completes it).
    if (end == i || end >= text.size()) continue;
    if (straddling_only && !(pos < boundary && end >= boundary)) continue;
    usage_tokens_ = value;
    has_usage_ = true;
  }
}

}  // namespace prefixgate::proxy
