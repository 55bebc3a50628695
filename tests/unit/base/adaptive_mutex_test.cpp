// util::AdaptiveMutex (the prefix index's shard lock): excludes like std::mutex, try_lock fails while held, and
// threads that gave up spinning and sleep are woken by the unlock (none is lost, none is left asleep).
#include "util/adaptive_mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

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

// Ensures threads that wait longer than their spinning (here: 100 ms behind a held lock, so they sleep in the
// kernel) are woken by the unlock and each gets the lock in turn, and that the lock is free again after them (a
// lost wake-up would leave a thread asleep for ever and the join would hang).
TEST(AdaptiveMutexTest, SleepingWaitersAreWokenByTheUnlock) {
  AdaptiveMutex m;
  m.lock();
  std::atomic<int> inside{0}, done{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 3; ++i)
    waiters.emplace_back([&] {
      std::lock_guard lock(m);
      inside.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the others go back to sleep behind this one
      inside.fetch_sub(1);
      done.fetch_add(1);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(done.load(), 0);  // nobody got in while it was held
  m.unlock();
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(done.load(), 3);
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// Ensures exclusion holds on the sleeping path too: four threads whose critical sections sometimes sleep (so the
// others exhaust their spinning and sleep on the lock) lose no update and never overlap.
TEST(AdaptiveMutexTest, ContendedWithSleepsInsideLosesNoUpdate) {
  AdaptiveMutex m;
  long count = 0;
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  constexpr long kEach = 3000;
  auto work = [&] {
    for (long i = 0; i < kEach; ++i) {
      std::lock_guard lock(m);
      if (inside.fetch_add(1) != 0) overlapped = true;
      count = count + 1;
      if (i % 200 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      inside.fetch_sub(1);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(count, 4 * kEach);
  EXPECT_FALSE(overlapped.load());
}

}  // namespace
}  // namespace prefixgate::util
