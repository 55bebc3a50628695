#include "trace/sampler.h"

#include <cmath>
#include <cstdint>

namespace prefixgate::trace {
namespace {
uint8_t hexValue(char c) {
  if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
  if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
  if (c >= 'A' && c <= 'F') return static_cast<uint8_t>(c - 'A' + 10);
  return 0;
}
}  // namespace

bool sampledByRatio(std::string_view trace_id, double ratio) {
  if (!(ratio > 0)) return false;  // NaN too
  if (ratio >= 1) return true;
  if (trace_id.size() != 32) return false;
  uint64_t low = 0;
  for (char c : trace_id.substr(16)) low = low << 4 | hexValue(c);
  const uint64_t bound = static_cast<uint64_t>(std::ldexp(ratio, 63));
  return (low >> 1) < bound;
}

bool shouldSample(const std::optional<util::TraceParent>& parent, std::string_view trace_id, double ratio) {
  if (parent) return parent->sampled();
  return sampledByRatio(trace_id, ratio);
}

}  // namespace prefixgate::trace
