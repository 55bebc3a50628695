// ThreadSpares / CapacityPool: what a finished request gives back is handed to the next one on the same thread
// (its capacity, not its contents), within the bounds: no more than kSparesPerThread kept, nothing over
// kSpareKeepBytes, no string's in-place buffer; a thread that ends frees its spares.
#include "util/thread_spares.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace prefixgate::util {
namespace {

// Each test drains the pool first: the thread may hold spares from an earlier test.
template <class C>
void drain() {
  C c;
  while (ThreadSpares<C>::take(c)) {
  }
}

TEST(ThreadSpares, AGivenVectorComesBackEmptyWithItsCapacity) {
  drain<std::vector<int>>();
  std::vector<int> v(1000, 7);
  const int* data = v.data();
  VectorPool<int>::give(std::move(v));
  std::vector<int> again = VectorPool<int>::take();
  EXPECT_TRUE(again.empty());
  EXPECT_GE(again.capacity(), 1000u);
  EXPECT_EQ(again.data(), data);  // the same memory: no allocation
  EXPECT_EQ(VectorPool<int>::take().capacity(), 0u);  // one given, one taken
}

TEST(ThreadSpares, LargeCapacityIsFreedNotKept) {
  drain<std::vector<char>>();
  VectorPool<char>::give(std::vector<char>(kSpareKeepBytes + 1));
  EXPECT_EQ(VectorPool<char>::take().capacity(), 0u);
  VectorPool<char>::give(std::vector<char>(kSpareKeepBytes));
  EXPECT_EQ(VectorPool<char>::take().capacity(), kSpareKeepBytes);
}

TEST(ThreadSpares, AtMostTheBoundIsKeptPerThread) {
  drain<std::vector<double>>();
  for (size_t i = 0; i < kSparesPerThread + 10; ++i) VectorPool<double>::give(std::vector<double>(16));
  size_t kept = 0;
  while (VectorPool<double>::take().capacity() > 0) ++kept;
  EXPECT_EQ(kept, kSparesPerThread);
}

TEST(ThreadSpares, AStringsInPlaceBufferIsNotKeptButItsMemoryIs) {
  drain<std::string>();
  StringPool::give(std::string("short"));
  EXPECT_EQ(StringPool::take().capacity(), std::string().capacity());
  std::string long_text(4096, 'x');
  StringPool::give(std::move(long_text));
  std::string again = StringPool::take();
  EXPECT_TRUE(again.empty());
  EXPECT_GE(again.capacity(), 4096u);
}

TEST(ThreadSpares, SparesBelongToTheirThread) {
  drain<std::vector<long>>();
  VectorPool<long>::give(std::vector<long>(64));
  size_t other_capacity = 1;
  std::thread other([&] {
    other_capacity = VectorPool<long>::take().capacity();  // this thread has none
    VectorPool<long>::give(std::vector<long>(64));          // freed with the thread's spares when it ends
  });
  other.join();
  EXPECT_EQ(other_capacity, 0u);
  EXPECT_GE(VectorPool<long>::take().capacity(), 64u);  // the one given on this thread
}

}  // namespace
}  // namespace prefixgate::util
