#include "util/traceparent.h"

namespace prefixgate::util {
namespace {

constexpr size_t kVersion00Length = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2

bool lowerHex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool allZeros(std::string_view s) { return s.find_first_not_of('0') == std::string_view::npos; }

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

}  // namespace prefixgate::util
