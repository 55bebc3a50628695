// log::Throttle: one line through per interval, and the next line says how many were held back.
#include <gtest/gtest.h>

#include <chrono>
#include <atomic>
#include <thread>
#include <vector>

#include "util/log.h"

namespace prefixgate::log {
namespace {

TEST(LogThrottle, LetsOneLineThroughPerIntervalAndCountsTheRest) {
  Throttle throttle(10'000);
  uint64_t suppressed = 99;
  ASSERT_TRUE(throttle.allow(suppressed));
  EXPECT_EQ(suppressed, 0u);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(throttle.allow(suppressed));
}

TEST(LogThrottle, TheNextLineReportsHowManyWereHeldBack) {
  Throttle throttle(30);
  uint64_t suppressed = 0;
  ASSERT_TRUE(throttle.allow(suppressed));
  int held = 0;
  while (!throttle.allow(suppressed)) {
    ++held;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(held, 0);
  EXPECT_EQ(suppressed, static_cast<uint64_t>(held));
}

TEST(LogThrottle, ManyThreadsGetOneLineBetweenThem) {
  Throttle throttle(60'000);
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      uint64_t suppressed = 0;
      for (int i = 0; i < 10'000; ++i)
        if (throttle.allow(suppressed)) allowed.fetch_add(1);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 1);
}

}  // namespace
}  // namespace prefixgate::log
