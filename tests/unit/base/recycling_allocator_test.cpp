// RecyclingAllocator: a freed small block is handed out again on the same thread (no malloc in the steady state),
// whatever the size within its class; blocks freed on another thread, or larger than the classes, stay valid.
#include "util/recycling_allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace prefixgate::util {
namespace {

TEST(RecyclingAllocator, AFreedBlockIsReusedForAnySizeOfItsClass) {
  void* first = recycledAllocate(100);
  recycledDeallocate(first, 100);
  void* again = recycledAllocate(128);  // same class (65..128 bytes)
  EXPECT_EQ(again, first);
  std::memset(again, 0xab, 128);  // the whole class size is usable
  recycledDeallocate(again, 128);
  void* other_class = recycledAllocate(200);
  EXPECT_NE(other_class, first);
  recycledDeallocate(other_class, 200);
}

TEST(RecyclingAllocator, LargeBlocksAndBlocksFreedOnAnotherThreadStayValid) {
  char* large = static_cast<char*>(recycledAllocate(kMaxRecycledBytes + 1));
  std::memset(large, 1, kMaxRecycledBytes + 1);
  recycledDeallocate(large, kMaxRecycledBytes + 1);

  void* block = recycledAllocate(64);
  void* reused = nullptr;
  std::thread other([&] {
    recycledDeallocate(block, 64);  // joins the other thread's list...
    reused = recycledAllocate(64);  // ...which hands it out there
    recycledDeallocate(reused, 64);
  });
  other.join();  // the thread's lists are freed as it exits
  EXPECT_EQ(reused, block);
}

TEST(RecyclingAllocator, BeastStyleContainersWork) {
  std::vector<std::string, RecyclingAllocator<std::string>> names;
  for (int i = 0; i < 100; ++i) names.push_back("field-" + std::to_string(i));
  ASSERT_EQ(names.size(), 100u);
  EXPECT_EQ(names[42], "field-42");
  EXPECT_TRUE(RecyclingAllocator<int>() == RecyclingAllocator<char>());
}

}  // namespace
}  // namespace prefixgate::util
