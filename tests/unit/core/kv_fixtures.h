#pragma once
// What the KV event index tests share: a clock that never moves and runs of distinct token ids.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::testing {

class FixedClock final : public Clock {
 public:
  SteadyTime now() const override { return SteadyTime{}; }
};

// n consecutive token ids from `first`: prompts that share nothing unless their ranges overlap.
inline std::vector<uint32_t> tokens(uint32_t first, size_t n) {
  std::vector<uint32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = first + static_cast<uint32_t>(i);
  return out;
}

}  // namespace prefixgate::testing
