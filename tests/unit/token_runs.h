#pragma once
// Token id runs the unit tests build prompts from (gateway core and simulator alike).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace prefixgate::testing {

// n consecutive token ids from `first`: prompts that share nothing unless their ranges overlap.
inline std::vector<uint32_t> tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = first + static_cast<uint32_t>(i);
  return out;
}

// `a` followed by `b`.
inline std::vector<uint32_t> concat(std::vector<uint32_t> a, const std::vector<uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace prefixgate::testing
