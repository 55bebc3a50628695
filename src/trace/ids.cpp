#include "trace/ids.h"

#include <optional>
#include <random>

namespace prefixgate::trace {
namespace {

thread_local std::optional<std::mt19937_64> id_rng;

std::mt19937_64& rng() {
  if (!id_rng) {
    std::random_device device;
    id_rng.emplace((static_cast<uint64_t>(device()) << 32) ^ device());
  }
  return *id_rng;
}

constexpr char kHex[] = "0123456789abcdef";

// `words` random 64-bit words as hex into `out`, drawn again while all are zero (an all-zero id is invalid).
template <size_t N>
void fill(std::array<char, N>& out) {
  constexpr size_t kWords = N / 16;
  uint64_t words[kWords];
  bool zero = true;
  while (zero) {
    for (uint64_t& w : words) {
      w = rng()();
      zero = zero && w == 0;
    }
  }
  for (size_t i = 0; i < kWords; ++i)
    for (size_t d = 0; d < 16; ++d) out[i * 16 + d] = kHex[(words[i] >> (60 - 4 * d)) & 0xf];
}

}  // namespace

void seedIds(uint64_t seed) { id_rng.emplace(seed); }

TraceIdText newTraceId() {
  TraceIdText id;
  fill(id);
  return id;
}

SpanIdText newSpanId() {
  SpanIdText id;
  fill(id);
  return id;
}

}  // namespace prefixgate::trace
