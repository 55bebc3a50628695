#include "proxy/failover.h"

#include <gtest/gtest.h>

#include <vector>

#include "discovery/pod_set.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::proxy {
namespace {

using discovery::PodState;
using K = FailureKind;

// Records the sink's calls in order.
class RecordingSink : public HealthSink {
 public:
  void podFailed(PodState& pod) override { calls.push_back("pod_failed " + pod.name()); }
  void requestFailed(PodState& pod, uint64_t hash) override {
    calls.push_back("request_failed " + pod.name());
    hashes.push_back(hash);
  }
  void succeeded(PodState& pod) override { calls.push_back("succeeded " + pod.name()); }
  std::vector<std::string> calls;
  std::vector<uint64_t> hashes;
};

class FailoverTest : public ::testing::Test {
 protected:
  PodState a_{PodId{1}, testing::podSpec("a", 1)};
  PodState b_{PodId{2}, testing::podSpec("b", 2)};
  PodState c_{PodId{3}, testing::podSpec("c", 3)};
  Attempt on(PodState& pod, K failure, bool reused = false) { return Attempt{&pod, failure, reused, false}; }
};

// A response head below 500 is relayed; so is anything once the next step is to give up.
TEST_F(FailoverTest, AnAnswerIsRelayed) {
  std::vector<Attempt> attempts{on(a_, K::kNone)};
  EXPECT_EQ(nextStep(attempts, 1), NextStep::kRelay);
}

// A reused pooled connection that closes before any byte is retried once, fresh, on the same pod, without using
// the pod-switch budget; the fresh connection failing the same way then switches pod.
TEST_F(FailoverTest, StalePooledConnectionIsRetriedFreshOnce) {
  std::vector<Attempt> attempts{on(a_, K::kClosedBeforeResponse, true)};
  EXPECT_EQ(nextStep(attempts, 0), NextStep::kRetryFresh);
  attempts.push_back(on(a_, K::kClosedBeforeResponse));
  EXPECT_EQ(nextStep(attempts, 1), NextStep::kSwitchPod);
  EXPECT_EQ(nextStep(attempts, 0), NextStep::kGiveUp);
  std::vector<Attempt> bad_head{on(a_, K::kBadResponse, true)};
  EXPECT_EQ(nextStep(bad_head, 0), NextStep::kRetryFresh);
}

// max_retries bounds the pod switches: refused connections, closes before the response and 5xx answers switch
// until the budget is spent.
TEST_F(FailoverTest, MaxRetriesBoundsPodSwitches) {
  for (K failure : {K::kConnect, K::kConnectTimeout, K::kClosedBeforeResponse, K::kEngineError, K::kBadResponse}) {
    std::vector<Attempt> attempts{on(a_, failure)};
    EXPECT_EQ(nextStep(attempts, 2), NextStep::kSwitchPod) << failureLabel(failure);
    attempts.push_back(on(b_, failure));
    EXPECT_EQ(nextStep(attempts, 2), NextStep::kSwitchPod) << failureLabel(failure);
    attempts.push_back(on(c_, failure));
    EXPECT_EQ(nextStep(attempts, 2), NextStep::kGiveUp) << failureLabel(failure);
    EXPECT_EQ(nextStep(std::vector<Attempt>{on(a_, failure)}, 0), NextStep::kGiveUp) << failureLabel(failure);
  }
  // A fresh-connection retry on the same pod is not a switch.
  std::vector<Attempt> attempts{on(a_, K::kClosedBeforeResponse, true), on(a_, K::kConnect)};
  EXPECT_EQ(nextStep(attempts, 1), NextStep::kSwitchPod);
}

// Timeouts (the engine may still be working), local errors, size limits and a client that left are not retried;
// nor is anything after a response byte reached the client.
TEST_F(FailoverTest, NeverRetried) {
  for (K failure : {K::kResponseHeaderTimeout, K::kIdleTimeout, K::kLocal, K::kResponseTooLarge, K::kClientGone,
                    K::kInterrupted})
    EXPECT_EQ(nextStep(std::vector<Attempt>{on(a_, failure, true)}, 3), NextStep::kGiveUp) << failureLabel(failure);
  Attempt started = on(a_, K::kClosedBeforeResponse, true);
  started.response_started = true;
  EXPECT_EQ(nextStep(std::vector<Attempt>{started}, 3), NextStep::kGiveUp);
}

// Refusals and timeouts count against the pod; closes and 5xx are suspect; local errors, size limits and client
// hang-ups count for nobody.
TEST_F(FailoverTest, Blame) {
  EXPECT_EQ(blameOf(K::kConnect), Blame::kPod);
  EXPECT_EQ(blameOf(K::kConnectTimeout), Blame::kPod);
  EXPECT_EQ(blameOf(K::kResponseHeaderTimeout), Blame::kPod);
  EXPECT_EQ(blameOf(K::kClosedBeforeResponse), Blame::kSuspect);
  EXPECT_EQ(blameOf(K::kEngineError), Blame::kSuspect);
  EXPECT_EQ(blameOf(K::kInterrupted), Blame::kSuspect);
  EXPECT_EQ(blameOf(K::kLocal), Blame::kNone);
  EXPECT_EQ(blameOf(K::kResponseTooLarge), Blame::kNone);
  EXPECT_EQ(blameOf(K::kClientGone), Blame::kNone);
  EXPECT_EQ(failureLabel(K::kResponseTooLarge), "response_too_large");
  EXPECT_EQ(failureLabel(K::kLocal), "local");
}

// A suspect failure followed by success elsewhere counts against the failed pod (with the request's hash); the
// stale pooled connection counts for nobody; the serving pod is told it succeeded.
TEST_F(FailoverTest, ReportsSuspectFailureWhenAnotherPodServed) {
  RecordingSink sink;
  std::vector<Attempt> attempts{on(a_, K::kClosedBeforeResponse, true), on(a_, K::kEngineError), on(b_, K::kNone)};
  reportHealth(attempts, "body", sink);
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"succeeded b", "request_failed a"}));
  EXPECT_EQ(sink.hashes, std::vector<uint64_t>{requestHash("body")});
  EXPECT_NE(requestHash("body"), requestHash("other body"));
}

// The same request failing on two pods is the request's fault: neither pod hears of it. Pod failures are still
// reported.
TEST_F(FailoverTest, SameRequestFailingOnTwoPodsBlamesNoPod) {
  RecordingSink sink;
  std::vector<Attempt> attempts{on(c_, K::kConnect), on(a_, K::kClosedBeforeResponse), on(b_, K::kEngineError)};
  reportHealth(attempts, "poison", sink);
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"pod_failed c"}));
}

// A pod failure is reported as its attempt ends, once: the final report does not repeat it; other verdicts wait
// for the end (whether the request is to blame depends on every attempt).
TEST_F(FailoverTest, PodFailureIsReportedAtOnceAndOnlyOnce) {
  RecordingSink sink;
  std::vector<Attempt> attempts{on(c_, K::kConnect)};
  reportPodFailure(attempts.back(), sink);
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"pod_failed c"}));
  attempts.push_back(on(a_, K::kClosedBeforeResponse));
  reportPodFailure(attempts.back(), sink);  // a suspect failure: not yet
  attempts.push_back(on(b_, K::kNone));
  reportPodFailure(attempts.back(), sink);
  EXPECT_EQ(sink.calls.size(), 1u);
  reportHealth(attempts, "body", sink);
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"pod_failed c", "succeeded b", "request_failed a"}));
}

// A lone suspect failure (no other pod to try) is reported; local errors, size limits and hang-ups are not.
TEST_F(FailoverTest, LoneFailures) {
  RecordingSink sink;
  reportHealth(std::vector<Attempt>{on(a_, K::kInterrupted)}, "x", sink);
  reportHealth(std::vector<Attempt>{on(a_, K::kLocal)}, "x", sink);
  reportHealth(std::vector<Attempt>{on(a_, K::kResponseTooLarge)}, "x", sink);
  reportHealth(std::vector<Attempt>{on(a_, K::kClientGone)}, "x", sink);
  EXPECT_EQ(sink.calls, (std::vector<std::string>{"request_failed a"}));
}

}  // namespace
}  // namespace prefixgate::proxy
