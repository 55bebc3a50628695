#include "sync/load_entries.h"

#include <algorithm>
#include <charconv>

namespace prefixgate::sync {

std::string encodeLoads(const std::vector<std::pair<std::string, int32_t>>& loads) {
  std::string out;
  for (const auto& [address, n] : loads) {
    if (n <= 0) continue;
    out += address;
    out += ' ';
    out += std::to_string(n);
    out += '\n';
  }
  return out;
}

int32_t addLoads(int64_t a, int64_t b) {
  // Each term clamped first, so the 64-bit sum of two is far from overflowing.
  const auto bounded = [](int64_t v) { return std::clamp<int64_t>(v, 0, kMaxRemoteInFlight); };
  return static_cast<int32_t>(std::min<int64_t>(bounded(a) + bounded(b), kMaxRemoteInFlight));
}

int32_t sumLoads(const std::map<std::string, int32_t, std::less<>>& by_replica) {
  int32_t sum = 0;
  for (const auto& [replica, n] : by_replica) sum = addLoads(sum, n);
  return sum;
}

void decodeLoads(std::string_view text, std::map<std::string, int32_t, std::less<>>& out) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos || space == 0) continue;
    int64_t n = 0;
    const std::string_view count = line.substr(space + 1);
    const char* end = count.data() + count.size();
    const auto parsed = std::from_chars(count.data(), end, n);
    // A count beyond 64 bits, with trailing bytes, or not above zero says nothing a replica would publish.
    if (parsed.ec != std::errc{} || parsed.ptr != end || n <= 0) continue;
    const std::string_view address = line.substr(0, space);
    auto it = out.find(address);
    if (it == out.end()) out.emplace(std::string(address), addLoads(0, n));
    else it->second = addLoads(it->second, n);
  }
}

}  // namespace prefixgate::sync
