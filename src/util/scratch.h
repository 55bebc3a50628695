#pragma once
// Per-thread scratch vectors are reused so that a steady stream of requests allocates nothing; but one huge
// request must not leave its megabytes behind on every thread. After use, a vector that grew beyond
// kScratchKeepBytes is freed (the next request of ordinary size allocates it once more).
#include <cstddef>
#include <vector>

namespace prefixgate::util {

inline constexpr size_t kScratchKeepBytes = 1 << 20;

template <class T>
void releaseIfLarge(std::vector<T>& v, size_t keep_bytes = kScratchKeepBytes) {
  if (v.capacity() * sizeof(T) > keep_bytes) std::vector<T>().swap(v);
}

}  // namespace prefixgate::util
