#include "trace/span.h"

#include <chrono>

namespace prefixgate::trace {

uint64_t nowUnixNano() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace prefixgate::trace
