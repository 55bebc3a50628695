// trace::SpanBuffer: a full buffer drops and counts instead of waiting; take() hands out a batch as soon as one is
// full, or what is queued once the oldest span has waited the export delay, and everything left after close().
#include "trace/span_buffer.h"

#include <gtest/gtest.h>

#include <thread>

namespace prefixgate::trace {
namespace {

using std::chrono::milliseconds;

Span named(std::string name) {
  Span s;
  s.name = std::move(name);
  return s;
}

TEST(SpanBuffer, DropsAndCountsWhenFull) {
  SpanBuffer buffer(3, 10);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(buffer.push(named("s" + std::to_string(i))));
  EXPECT_FALSE(buffer.push(named("over")));
  EXPECT_FALSE(buffer.push(named("over again")));
  EXPECT_EQ(buffer.dropped(), 2u);
  buffer.close();
  std::vector<Span> out;
  ASSERT_TRUE(buffer.take(out, milliseconds(60000)));  // closed: at once, whatever the delay
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name, "s0");
  EXPECT_FALSE(buffer.take(out, milliseconds(0)));  // closed and empty
  EXPECT_FALSE(buffer.push(named("after close")));
  EXPECT_EQ(buffer.dropped(), 3u);
}

TEST(SpanBuffer, AFullBatchIsTakenWithoutWaitingForTheDelay) {
  SpanBuffer buffer(100, 2);
  buffer.push(named("a"));
  buffer.push(named("b"));
  std::vector<Span> out;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(buffer.take(out, milliseconds(60000)));
  EXPECT_EQ(out.size(), 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(SpanBuffer, AShortBatchLeavesOnceItsOldestSpanWaitedTheDelay) {
  SpanBuffer buffer(100, 50);
  buffer.push(named("lonely"));
  std::vector<Span> out;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(buffer.take(out, milliseconds(30)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(30));
  ASSERT_EQ(out.size(), 1u);
}

// Many threads push while one takes: every span is either taken once or counted dropped (TSan runs this).
TEST(SpanBuffer, ConcurrentPushesAreTakenOrCounted) {
  SpanBuffer buffer(64, 16);
  constexpr int kThreads = 4, kEach = 2000;
  size_t taken = 0;
  std::thread taker([&] {
    std::vector<Span> out;
    while (buffer.take(out, milliseconds(1))) taken += out.size();
  });
  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t)
    pushers.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) buffer.push(named("x"));
    });
  for (auto& p : pushers) p.join();
  buffer.close();
  taker.join();
  EXPECT_EQ(taken + buffer.dropped(), static_cast<size_t>(kThreads * kEach));
}

}  // namespace
}  // namespace prefixgate::trace
