#include "util/traceparent.h"

#include <algorithm>

namespace prefixgate::util {
namespace {

constexpr size_t kVersion00Length = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
constexpr char kHexDigits[] = "0123456789abcdef";

bool lowerHex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool allZeros(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

uint8_t hexValue(char c) { return static_cast<uint8_t>(c <= '9' ? c - '0' : c - 'a' + 10); }

}  // namespace

std::string_view traceIdFromTraceparent(std::string_view h) {
  if (h.size() < kVersion00Length) return {};
  const std::string_view version = h.substr(0, 2);
  if (!lowerHex(version) || version == "ff") return {};
  if (version == "00" ? h.size() != kVersion00Length : (h.size() > kVersion00Length && h[kVersion00Length] != '-'))
    return {};
  if (h[2] != '-' || h[35] != '-' || h[52] != '-') return {};
  const std::string_view trace_id = h.substr(3, 32), parent_id = h.substr(36, 16), flags = h.substr(53, 2);
  if (!lowerHex(trace_id) || !lowerHex(parent_id) || !lowerHex(flags)) return {};
  if (allZeros(trace_id) || allZeros(parent_id)) return {};
  return trace_id;
}

std::optional<TraceParent> parseTraceparent(std::string_view header) {
  const std::string_view trace_id = traceIdFromTraceparent(header);
  if (trace_id.empty()) return std::nullopt;
  TraceParent out;
  std::copy(trace_id.begin(), trace_id.end(), out.trace_id.begin());
  const std::string_view parent_id = header.substr(36, 16);
  std::copy(parent_id.begin(), parent_id.end(), out.parent_id.begin());
  out.flags = static_cast<uint8_t>(hexValue(header[53]) << 4 | hexValue(header[54]));
  return out;
}

TraceparentText formatTraceparent(std::string_view trace_id, std::string_view span_id, uint8_t flags) {
  TraceparentText out;
  char* p = out.data();
  *p++ = '0';
  *p++ = '0';
  *p++ = '-';
  p = std::copy_n(trace_id.begin(), std::min<size_t>(trace_id.size(), 32), p);
  *p++ = '-';
  p = std::copy_n(span_id.begin(), std::min<size_t>(span_id.size(), 16), p);
  *p++ = '-';
  *p++ = kHexDigits[flags >> 4];
  *p++ = kHexDigits[flags & 0xf];
  return out;
}

}  // namespace prefixgate::util
