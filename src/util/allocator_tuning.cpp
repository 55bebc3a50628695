#include "util/allocator_tuning.h"

#include <malloc.h>

#include <string_view>

namespace prefixgate::util {

std::string tuneAllocator(const char* tunables) {
  if (tunables != nullptr && std::string_view(tunables).find("glibc.malloc.") != std::string_view::npos)
    return "allocator: GLIBC_TUNABLES sets glibc.malloc tunables; its thresholds left as they say";
  const bool ok = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapBlockBytes)) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeptFreeBytes)) == 1;
  if (!ok) return "allocator: mallopt refused the thresholds; glibc's defaults stay";
  return "allocator: blocks up to " + std::to_string(kHeapBlockBytes >> 20) + " MiB from the heap, up to " +
         std::to_string(kKeptFreeBytes >> 20) + " MiB of free memory kept per heap (GLIBC_TUNABLES glibc.malloc.* "
         "overrides)";
}

}  // namespace prefixgate::util
