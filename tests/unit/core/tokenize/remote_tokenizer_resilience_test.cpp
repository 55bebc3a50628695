// The remote tokenizer when pods are slow or fail (issue 24): the per-pod breaker (a pod that timed out, could not
// be reached or lost to a hedge is skipped, then probed) and the hedge (a second pod asked when the first is slow).
// Against fake engines on loopback; the breaker's rules alone: tests/unit/tokenize/tokenize_breaker_test.cpp.
#include <gtest/gtest.h>

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <list>
#include <string>
#include <vector>

#include "tokenize/remote_tokenizer.h"
#include "unit/core/fake_tokenize_engine.h"

namespace prefixgate::tokenize {
namespace {

namespace asio = boost::asio;
using fakes::FakeEngine;
using State = TokenizeBreakers::State;
using std::chrono::milliseconds;

class RemoteTokenizerResilienceTest : public ::testing::Test {
 protected:
  // A tokenizer over `pods`, by default with a 500 ms timeout, a 50 ms hedge delay and a 100 ms first backoff.
  RemoteTokenizer make(RemoteTokenizerOptions options = fastOptions()) {
    return RemoteTokenizer(options, [this](std::string_view model, std::vector<TokenizerPod>& out) {
      if (model == "m") out = pods;
    });
  }
  static RemoteTokenizerOptions fastOptions() {
    RemoteTokenizerOptions options;
    options.timeout = milliseconds(500);
    options.hedge_delay = milliseconds(50);
    options.breaker = {100, 400};
    return options;
  }
  TokenizeResult run(RemoteTokenizer& tokenizer, const TokenizeInput& input) {
    return fakes::runTokenize(io_, tokenizer, input, nullptr);
  }
  // Lets `ms` pass on the test's io_context (a breaker's backoff; the fake engines keep serving meanwhile).
  void let(milliseconds ms) {
    asio::steady_timer timer(io_, ms);
    bool fired = false;
    timer.async_wait([&](boost::system::error_code) { fired = true; });
    while (!fired) io_.run_one();
  }
  // A distinct chat request per call (a cache hit would ask no pod).
  TokenizeInput chat(int n) {
    texts_.push_back(R"([{"role":"user","content":"question )" + std::to_string(n) + R"("}])");
    return {"m", true, texts_.back(), "", ""};
  }
  asio::io_context io_;
  std::vector<TokenizerPod> pods;
  std::list<std::string> texts_;  // the views of chat() point into it
};

// Ensures a pod whose /tokenize is slow (issue 24: 5 s against a 500 ms timeout, every third request paid it) costs
// one hedge, not a timeout per call: the hedge to the next pod answers, the slow pod's breaker opens (slow), the
// calls after it skip the slow pod without waiting, and after the backoff it is probed again and, now quick, closed.
TEST_F(RemoteTokenizerResilienceTest, SlowPodIsHedgedThenSkippedThenProbed) {
  FakeEngine slow(io_), quick(io_);
  slow.delay = milliseconds(5000);
  pods = {slow.pod(1, 0), quick.pod(2, 1)};  // the slow pod is the least loaded: asked first
  RemoteTokenizerOptions options = fastOptions();
  options.breaker = {300, 1200};  // room for the calls below within the first backoff, even under sanitizers
  RemoteTokenizer tokenizer = make(options);
  TokenizeResult first = run(tokenizer, chat(0));
  ASSERT_EQ(first.outcome, TokenizeOutcome::kMiss) << first.error;
  EXPECT_EQ(first.pod, "fake-2");
  EXPECT_LT(first.seconds, 0.5) << "the hedge answered before the timeout";
  EXPECT_EQ(tokenizer.hedges().won, 1u);
  EXPECT_EQ(tokenizer.breakerOpens(BreakerFailure::kSlow), 1u);
  EXPECT_EQ(tokenizer.breaker(1).state, State::kOpen);
  EXPECT_EQ(tokenizer.breaker(1).last, BreakerFailure::kSlow);
  EXPECT_EQ(tokenizer.breaker(2).state, State::kClosed);

  for (int i = 1; i <= 5; ++i) {
    TokenizeResult next = run(tokenizer, chat(i));
    ASSERT_EQ(next.outcome, TokenizeOutcome::kMiss) << next.error;
    EXPECT_EQ(next.pod, "fake-2");
  }
  EXPECT_EQ(slow.bodies.size(), 1u) << "skipped while its breaker is open";
  EXPECT_EQ(quick.bodies.size(), 6u);
  EXPECT_EQ(tokenizer.hedges().won, 1u) << "no hedge while the slow pod is skipped";

  slow.delay = milliseconds(0);
  let(milliseconds(350));
  EXPECT_EQ(tokenizer.breaker(1).state, State::kHalfOpen);
  TokenizeResult probe = run(tokenizer, chat(6));
  ASSERT_EQ(probe.outcome, TokenizeOutcome::kMiss) << probe.error;
  EXPECT_EQ(probe.pod, "fake-1") << "the pod is tried again after the backoff";
  EXPECT_EQ(tokenizer.breaker(1).state, State::kClosed);
  EXPECT_EQ(slow.bodies.size(), 2u);
}

// Ensures a probe that is slow again reopens the breaker for twice as long (the backoff grows on repeated failures).
TEST_F(RemoteTokenizerResilienceTest, FailedProbeDoublesTheBackoff) {
  FakeEngine slow(io_), quick(io_);
  slow.delay = milliseconds(5000);
  pods = {slow.pod(1, 0), quick.pod(2, 1)};
  RemoteTokenizer tokenizer = make();
  ASSERT_EQ(run(tokenizer, chat(0)).outcome, TokenizeOutcome::kMiss);
  let(milliseconds(120));
  ASSERT_EQ(run(tokenizer, chat(1)).outcome, TokenizeOutcome::kMiss);  // the probe, slow again: hedged
  EXPECT_EQ(slow.bodies.size(), 2u);
  const TokenizeBreakers::View view = tokenizer.breaker(1);
  EXPECT_EQ(view.state, State::kOpen);
  EXPECT_EQ(view.failures, 2u);
  EXPECT_GT(view.retry_in_ms, 100) << "200 ms after the second failure";
  EXPECT_EQ(tokenizer.hedges().won, 2u);
}

// Ensures pods that all time out are all skipped afterwards (outcome breaker_open, nothing sent) instead of every
// request waiting out the timeout, and the hedge that failed too is counted.
TEST_F(RemoteTokenizerResilienceTest, AllPodsTimingOutAreSkipped) {
  FakeEngine a(io_), b(io_);
  a.delay = b.delay = milliseconds(5000);
  pods = {a.pod(1, 0), b.pod(2, 1)};
  RemoteTokenizerOptions options = fastOptions();
  options.timeout = milliseconds(150);
  options.breaker = {60000, 60000};
  RemoteTokenizer tokenizer = make(options);
  TokenizeResult first = run(tokenizer, chat(0));
  EXPECT_EQ(first.outcome, TokenizeOutcome::kTimeout) << first.error;
  EXPECT_NE(first.error.find("fake-1"), std::string::npos) << first.error;
  EXPECT_NE(first.error.find("fake-2"), std::string::npos) << first.error;
  EXPECT_EQ(tokenizer.hedges().failed, 1u);
  EXPECT_EQ(tokenizer.breakerOpens(BreakerFailure::kTimeout), 2u);
  TokenizeResult skipped = run(tokenizer, chat(1));
  EXPECT_EQ(skipped.outcome, TokenizeOutcome::kBreakerOpen);
  EXPECT_EQ(outcomeLabel(skipped.outcome), "breaker_open");
  EXPECT_NE(skipped.error.find("timeout"), std::string::npos) << skipped.error;
  EXPECT_EQ(a.bodies.size(), 1u);
  EXPECT_EQ(b.bodies.size(), 1u);
  tokenizer.forgetPod(1);
  EXPECT_EQ(tokenizer.breaker(1).state, State::kClosed);
}

// Ensures a pod that refuses connections opens its breaker (connection) while the retry on the next pod answers;
// an error status does not (it comes from the request, and quickly), nor does a hedge that lost to the first pod.
TEST_F(RemoteTokenizerResilienceTest, WhatOpensABreaker) {
  FakeEngine engine(io_), other(io_);
  pods = {TokenizerPod{9, "dead", "127.0.0.1", fakes::closedPort(io_), 0}, engine.pod(2, 1)};
  RemoteTokenizer tokenizer = make();
  ASSERT_EQ(run(tokenizer, chat(0)).outcome, TokenizeOutcome::kMiss);
  EXPECT_EQ(tokenizer.breaker(9).state, State::kOpen);
  EXPECT_EQ(tokenizer.breakerOpens(BreakerFailure::kConnection), 1u);

  engine.status = 500;
  EXPECT_EQ(run(tokenizer, chat(1)).outcome, TokenizeOutcome::kError);
  EXPECT_EQ(tokenizer.breaker(2).state, State::kClosed);

  // The first pod answers after the hedge went out, but before the hedge does: the hedge lost, nobody is slow.
  engine.status = 200;
  engine.delay = milliseconds(100);
  other.delay = milliseconds(2000);
  pods = {engine.pod(2, 0), other.pod(3, 1)};
  TokenizeResult result = run(tokenizer, chat(2));
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(result.pod, "fake-2");
  EXPECT_EQ(tokenizer.hedges().lost, 1u);
  EXPECT_EQ(tokenizer.breaker(2).state, State::kClosed);
  EXPECT_EQ(tokenizer.breaker(3).state, State::kClosed);
  EXPECT_EQ(other.bodies.size(), 1u);
}

}  // namespace
}  // namespace prefixgate::tokenize
