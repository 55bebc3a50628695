// util::AdaptiveMutex (the prefix index's shard lock): excludes like std::mutex, and try_lock fails while held.
#include "util/adaptive_mutex.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

namespace prefixgate::util {
namespace {

TEST(AdaptiveMutexTest, TryLockFailsWhileHeld) {
  AdaptiveMutex m;
  std::unique_lock lock(m);
  bool taken = true;
  std::thread([&] { taken = m.try_lock(); }).join();
  EXPECT_FALSE(taken);
  lock.unlock();
  std::thread([&] {
    taken = m.try_lock();
    if (taken) m.unlock();
  }).join();
  EXPECT_TRUE(taken);
}

// Ensures no increment made under the lock is lost when two threads make them at once (a plain int: without
// exclusion the read-modify-writes interleave and some are lost).
TEST(AdaptiveMutexTest, TwoThreadsLoseNoUpdate) {
  AdaptiveMutex m;
  long count = 0;
  constexpr long kEach = 200000;
  auto work = [&] {
    for (long i = 0; i < kEach; ++i) {
      std::lock_guard lock(m);
      count = count + 1;
    }
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  EXPECT_EQ(count, 2 * kEach);
}

}  // namespace
}  // namespace prefixgate::util
