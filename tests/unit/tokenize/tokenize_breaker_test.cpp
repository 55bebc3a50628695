// The remote tokenizer's per-pod breakers: open on a failure, half-open after the backoff with one probe, closed by
// the probe's answer, reopened for twice as long by its failure; stale reports change nothing.
#include "tokenize/tokenize_breaker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace prefixgate::tokenize {
namespace {

using State = TokenizeBreakers::State;

BreakerOptions options(int64_t backoff_ms = 100, int64_t max_backoff_ms = 350) { return {backoff_ms, max_backoff_ms}; }

// Ensures a pod that failed is skipped for the backoff, then probed by exactly one call; the probe's failure
// doubles the backoff (up to the maximum) and its answer closes the breaker, which a next failure opens for the
// first backoff again.
TEST(TokenizeBreakers, OpensProbesAndBacksOff) {
  TokenizeBreakers breakers(options());
  auto ticket = breakers.acquire(7, 0);
  ASSERT_TRUE(ticket);
  EXPECT_FALSE(ticket->probe);
  EXPECT_TRUE(breakers.failed(*ticket, BreakerFailure::kTimeout, 10));
  EXPECT_EQ(breakers.opens(BreakerFailure::kTimeout), 1u);
  EXPECT_FALSE(breakers.acquire(7, 10));
  EXPECT_FALSE(breakers.acquire(7, 109));
  EXPECT_TRUE(breakers.acquire(8, 50)) << "other pods are not affected";
  EXPECT_EQ(breakers.view(7, 60).state, State::kOpen);
  EXPECT_EQ(breakers.view(7, 60).retry_in_ms, 50);

  // Half-open: one probe at a time.
  EXPECT_EQ(breakers.view(7, 110).state, State::kHalfOpen);
  auto probe = breakers.acquire(7, 110);
  ASSERT_TRUE(probe);
  EXPECT_TRUE(probe->probe);
  EXPECT_FALSE(breakers.acquire(7, 111)) << "one probe only";
  EXPECT_TRUE(breakers.failed(*probe, BreakerFailure::kSlow, 120));  // reopens for 200 ms
  EXPECT_EQ(breakers.view(7, 120).failures, 2u);
  EXPECT_EQ(breakers.view(7, 120).last, BreakerFailure::kSlow);
  EXPECT_FALSE(breakers.acquire(7, 319));
  probe = breakers.acquire(7, 320);
  ASSERT_TRUE(probe);
  EXPECT_TRUE(breakers.failed(*probe, BreakerFailure::kConnection, 320));  // 400, capped at 350
  EXPECT_FALSE(breakers.acquire(7, 669));
  probe = breakers.acquire(7, 670);
  ASSERT_TRUE(probe);
  breakers.succeeded(*probe);
  EXPECT_EQ(breakers.view(7, 670).state, State::kClosed);
  EXPECT_EQ(breakers.size(), 0u);

  // Closed again: the next failure starts from the first backoff.
  ticket = breakers.acquire(7, 700);
  ASSERT_TRUE(ticket);
  EXPECT_FALSE(ticket->probe);
  EXPECT_TRUE(breakers.failed(*ticket, BreakerFailure::kTimeout, 700));
  EXPECT_FALSE(breakers.acquire(7, 799));
  EXPECT_TRUE(breakers.acquire(7, 800));
  EXPECT_EQ(breakers.opens(BreakerFailure::kTimeout), 2u);
  EXPECT_EQ(breakers.opens(BreakerFailure::kSlow), 1u);
  EXPECT_EQ(breakers.opens(BreakerFailure::kConnection), 1u);
}

// Ensures reports of calls that began before the breaker changed count for nothing: several calls in flight when a
// pod fails open it once, a success of one of them does not close it, and a probe abandoned without a verdict (its
// call took another pod's answer) lets the next call probe.
TEST(TokenizeBreakers, StaleReportsAndAbandonedProbes) {
  TokenizeBreakers breakers(options());
  auto a = breakers.acquire(1, 0), b = breakers.acquire(1, 0), c = breakers.acquire(1, 0);
  ASSERT_TRUE(a && b && c);
  EXPECT_TRUE(breakers.failed(*a, BreakerFailure::kTimeout, 5));
  EXPECT_FALSE(breakers.failed(*b, BreakerFailure::kTimeout, 6)) << "already open";
  breakers.succeeded(*c);
  EXPECT_EQ(breakers.view(1, 7).state, State::kOpen);
  EXPECT_EQ(breakers.view(1, 7).failures, 1u);
  EXPECT_EQ(breakers.opens(BreakerFailure::kTimeout), 1u);

  auto probe = breakers.acquire(1, 105);
  ASSERT_TRUE(probe);
  breakers.abandoned(*probe);
  auto next = breakers.acquire(1, 106);
  ASSERT_TRUE(next);
  EXPECT_TRUE(next->probe);
  EXPECT_FALSE(breakers.failed(*probe, BreakerFailure::kTimeout, 107)) << "the abandoned probe no longer counts";
  breakers.succeeded(*next);
  EXPECT_EQ(breakers.view(1, 108).state, State::kClosed);
  EXPECT_FALSE(breakers.failed(*next, BreakerFailure::kTimeout, 109)) << "closed since: a stale probe";
  EXPECT_EQ(breakers.view(1, 110).state, State::kClosed);

  EXPECT_TRUE(breakers.failed(*breakers.acquire(2, 0), BreakerFailure::kConnection, 0));
  breakers.forget(2);
  EXPECT_EQ(breakers.view(2, 1).state, State::kClosed);
  EXPECT_EQ(breakers.size(), 0u);
}

// Ensures threads acquiring and reporting at once keep one probe per half-open breaker and the counts consistent
// (run under ThreadSanitizer by scripts/test.sh).
TEST(TokenizeBreakers, ConcurrentCallsGetOneProbe) {
  TokenizeBreakers breakers(options(1, 1));
  std::atomic<int> probes{0};
  ASSERT_TRUE(breakers.failed(*breakers.acquire(3, 0), BreakerFailure::kTimeout, 0));
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!go.load()) std::this_thread::yield();
      if (auto ticket = breakers.acquire(3, 10)) probes += ticket->probe ? 1 : 0;
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(probes.load(), 1);
}

}  // namespace
}  // namespace prefixgate::tokenize
