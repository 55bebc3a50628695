// util::tuneAllocator: request-body-sized blocks come from the heap and stay there when freed, instead of being
// mapped and unmapped (or trimmed and faulted in again) per request; an operator's GLIBC_TUNABLES wins.
#include "util/allocator_tuning.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace prefixgate::util {
namespace {

bool sanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  return false;
}

TEST(AllocatorTuningTest, AnOperatorsMallocTunablesAreLeftAlone) {
  EXPECT_NE(tuneAllocator("glibc.malloc.trim_threshold=1048576").find("left as they say"), std::string::npos);
}

// Ensures a 256 KiB block (a long prompt's body) is neither mapped on its own (glibc's default above 128 KiB) nor
// handed back to the kernel when freed, so the next request's body reuses the same pages; a block over the bound
// is still mapped, so a huge request's memory goes back.
TEST(AllocatorTuningTest, BodySizedBlocksComeFromTheHeapAndStay) {
  if (sanitized()) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's";
  const std::string line = tuneAllocator(nullptr);
  ASSERT_NE(line.find("8 MiB from the heap"), std::string::npos) << line;
  const size_t mapped_before = mallinfo2().hblks;
  char* volatile body = static_cast<char*>(std::malloc(256 << 10));
  std::memset(body, 1, 256 << 10);
  EXPECT_EQ(mallinfo2().hblks, mapped_before);  // from the heap
  const size_t heap = mallinfo2().arena;
  std::free(body);
  EXPECT_EQ(mallinfo2().arena, heap);  // kept, not trimmed
  char* volatile huge = static_cast<char*>(std::malloc(kHeapBlockBytes + (1 << 20)));  // volatile: not elided
  huge[0] = 1;
  EXPECT_EQ(mallinfo2().hblks, mapped_before + 1);
  std::free(huge);
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
}

}  // namespace
}  // namespace prefixgate::util
