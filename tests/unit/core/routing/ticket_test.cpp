// The decision lifecycle (routing::Ticket): what the proxy tells a decision, and what routing does with it.
#include "routing/ticket.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "unit/core/pod_specs.h"
#include "unit/core/prefix_router_fixture.h"

namespace prefixgate::routing {
namespace {

// prefix-cache over pods a, b, c (PrefixRouterTest).
class TicketTest : public testing::PrefixRouterTest {
 protected:
  void SetUp() override { start({testing::podSpec("a", 1), testing::podSpec("b", 2), testing::podSpec("c", 3)}); }
  RouteQuery query(const std::string& prompt, bool dry = false, std::span<const PodId> exclude = {}) {
    request_.model = "m";
    request_.stream = true;
    request_.prompt_text = prompt;
    return RouteQuery{request_, "", "", exclude, dry};
  }
  Decision route(const std::string& prompt, bool dry = false) { return router_->choose(query(prompt, dry), rng_); }
  // The chosen-or-not match of `pod` for `prompt`, without recording anything.
  int matchOf(const std::string& prompt, const std::string& pod) {
    Decision d = route(prompt, true);
    for (const Candidate& c : d.candidates)
      if (c.pod->name() == pod) return c.match_percent;
    return -1;
  }
  discovery::PodPtr pod(const std::string& name) {
    for (const auto& p : pods_.snapshot()->pods())
      if (p->name() == name) return p;
    return nullptr;
  }
  static Completion streamed(double first_body_seconds) {
    Completion c;
    c.status = 200;
    c.first_byte_seconds = first_body_seconds / 2;
    c.first_body_seconds = first_body_seconds;
    c.prompt_tokens = 8;
    c.cached_tokens = 0;
    c.output_tokens = 50;
    return c;
  }
};

const std::string kPrompt = "aaaabbbbccccddddeeeeffffgggghhhh";  // 8 blocks

// Ensures an attempt that failed before its engine computed the prompt withdraws what the decision recorded for
// the pod (the next request with the prefix does not follow it there), while one that may have computed it keeps
// the records.
TEST_F(TicketTest, AFailedAttemptWithdrawsItsRecords) {
  Decision d = route(kPrompt);
  const std::string first = d.pod->name();
  ASSERT_EQ(matchOf(kPrompt, first), 100);  // recorded at the moment of choice
  d.ticket.attemptFailed(AttemptFailure::kNotComputed);
  EXPECT_EQ(matchOf(kPrompt, first), 0);

  const std::string other = "zzzzyyyyxxxxwwww";
  Decision kept = route(other);
  kept.ticket.attemptFailed(AttemptFailure::kMaybeComputed);  // e.g. no answer in time: it may hold them
  EXPECT_EQ(matchOf(other, kept.pod->name()), 100);
}

// Ensures a withdrawal takes only what the failed request added: the blocks the pod was predicted to hold before
// it (an earlier request's prefix) stay.
TEST_F(TicketTest, AWithdrawalKeepsThePrefixThePodHeldBefore) {
  Decision served = route(kPrompt);
  const std::string holder = served.pod->name();
  served.ticket.firstByte();
  served.ticket.completed(streamed(0.1));
  served = Decision{};
  Decision longer = route(kPrompt + "iiiijjjj");
  ASSERT_EQ(longer.pod->name(), holder);
  EXPECT_EQ(longer.ticket.facts().held_blocks, 8u);
  longer.ticket.attemptFailed(AttemptFailure::kNotComputed);
  EXPECT_EQ(matchOf(kPrompt, holder), 100);
  EXPECT_EQ(matchOf(kPrompt + "iiiijjjj", holder), 80);  // 8 of 10 blocks
}

// Ensures a failed-over request's first attempt trains nothing on the second pod: the second pod learns from its
// own decision's ticket (its own work when sent), the first pod learns nothing; and failover reuses the prompt's
// blocks instead of hashing it again.
TEST_F(TicketTest, ARetriedRequestTrainsOnlyThePodThatServedIt) {
  Decision first = route(kPrompt);
  const discovery::PodPtr failed = first.pod;
  first.ticket.attemptFailed(AttemptFailure::kNotComputed);
  const PodId tried[] = {failed->id()};
  Decision second = router_->chooseAgain(first, query(kPrompt, false, tried), rng_);
  ASSERT_TRUE(second.pod);
  ASSERT_NE(second.pod, failed);
  EXPECT_EQ(second.prompt.get(), first.prompt.get());  // the same blocks, not hashed again
  EXPECT_EQ(second.strategy, first.strategy);
  first = Decision{};  // the relay replaces the decision

  second.ticket.firstByte();
  const auto audit = second.ticket.completed(streamed(0.2));
  EXPECT_EQ(second.pod->signals().rates().read().samples, 1u);
  EXPECT_EQ(second.pod->signals().latency().read().samples, 1u);
  EXPECT_EQ(failed->signals().rates().read().samples, 0u);
  EXPECT_EQ(failed->signals().latency().read().samples, 0u);
  EXPECT_EQ(failed->signals().prediction().sums().responses, 0u);
  ASSERT_TRUE(audit);  // predicted 0 of 8 (nothing held it), the engine said 0
  EXPECT_EQ(second.pod->signals().prediction().sums().responses, 1u);
  EXPECT_EQ(matchOf(kPrompt, second.pod->name()), 100);
  EXPECT_EQ(matchOf(kPrompt, failed->name()), 0);
}

// Ensures the prefill work counted against the pod ends at the engine's first byte, and the in-flight count with
// the ticket.
TEST_F(TicketTest, FirstByteEndsThePrefillCountAndTheTicketTheInFlightCount) {
  Decision d = route(kPrompt);
  const discovery::PodPtr p = d.pod;
  EXPECT_EQ(p->signals().prefillRequests(), 1);
  EXPECT_EQ(p->signals().inFlight(), 1);
  EXPECT_TRUE(d.ticket.prefilling());
  d.ticket.firstByte();
  EXPECT_EQ(p->signals().prefillRequests(), 0);
  EXPECT_FALSE(d.ticket.prefilling());
  EXPECT_EQ(p->signals().inFlight(), 1);
  d = Decision{};
  EXPECT_EQ(p->signals().inFlight(), 0);
}

// Ensures a completed 200 feeds the pod's measured capacity at the Router's clock; a failed one trains nothing.
TEST_F(TicketTest, ACompletedResponseFeedsCapacityAtTheRoutersClock) {
  Decision d = route(kPrompt);
  const discovery::PodPtr p = d.pod;
  EXPECT_EQ(p->engine().capacityTokensPerSecond(now_ms_), 0);
  Completion c = streamed(0.1);
  c.output_tokens = 500;
  d.ticket.completed(c);
  now_ms_ += 1000;
  d.ticket.completed(c);  // a second response's worth a second later, at the Router's clock
  EXPECT_GT(p->engine().capacityTokensPerSecond(now_ms_), 0);
  d = Decision{};

  Decision bad = route("sssstttt");
  Completion failed;
  failed.status = 502;
  failed.first_byte_seconds = 0.5;
  EXPECT_FALSE(bad.ticket.completed(failed));
  EXPECT_EQ(bad.pod->signals().latency().read().samples, bad.pod == p ? 1u : 0u);
}

// Ensures a dry run (/debug/route) hands out an empty ticket: nothing counted, nothing recorded, nothing trained.
TEST_F(TicketTest, ADryRunTicketDoesNothing) {
  Decision d = route(kPrompt, true);
  ASSERT_TRUE(d.pod);
  EXPECT_EQ(d.pod->signals().inFlight(), 0);
  EXPECT_FALSE(d.ticket.prefilling());
  d.ticket.firstByte();
  EXPECT_FALSE(d.ticket.completed(streamed(0.1)));
  EXPECT_EQ(d.pod->signals().rates().read().samples, 0u);
  EXPECT_EQ(matchOf(kPrompt, d.pod->name()), 0);
}

// Ensures the per-pod bound is taken in one step: a pod below it counts one more request, a full one (counting the
// other replicas' requests and this replica's since their read) counts none.
TEST(PodSignalsTest, TryAddInFlightTakesOnlyASlotBelowTheBound) {
  PodSignals s;
  EXPECT_TRUE(s.tryAddInFlight(2));
  EXPECT_TRUE(s.tryAddInFlight(2));
  EXPECT_FALSE(s.tryAddInFlight(2));
  EXPECT_EQ(s.inFlight(), 2);
  s.releaseInFlight();
  s.setRemoteInFlight(1, 0);  // another replica's request fills the slot just freed
  EXPECT_FALSE(s.tryAddInFlight(2));
  EXPECT_TRUE(s.tryAddInFlight(3));
  EXPECT_EQ(s.inFlightAllReplicas(), 3);
}

// Ensures many request threads deciding at once never put more than limits.max_in_flight_per_pod requests on a pod:
// the bound read when the candidates are filtered was checked and then counted, so two threads that both saw the
// last free slot both took it (a pod with 5 of 4). Exactly the fleet's room is admitted; the rest are refused.
TEST_F(TicketTest, ConcurrentDecisionsNeverPassThePerPodBound) {
  config_.limits.max_in_flight_per_pod = 2;
  constexpr int kThreads = 8;
  constexpr int kEach = 6;
  std::vector<std::vector<Decision>> held(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      openai::RequestView request;
      request.model = "m";
      request.prompt_text = "thread " + std::to_string(t) + " asks about something else entirely";
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      for (int i = 0; i < kEach; ++i) {
        Decision d = router_->choose(RouteQuery{request, "", "", {}, false}, rng);
        if (d.failure == RouteFailure::kNone) held[t].push_back(std::move(d));
        else EXPECT_EQ(d.failure, RouteFailure::kAllOverloaded);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  size_t admitted = 0;
  for (const auto& h : held) admitted += h.size();
  EXPECT_EQ(admitted, 6u);  // 3 pods x 2
  for (const char* name : {"a", "b", "c"}) EXPECT_EQ(pod(name)->signals().inFlight(), 2) << name;
  held.clear();
  for (const char* name : {"a", "b", "c"}) EXPECT_EQ(pod(name)->signals().inFlight(), 0) << name;
}

}  // namespace
}  // namespace prefixgate::routing
