#include "routing/router.h"

#include <gtest/gtest.h>

#include <map>

#include "proxy/relay.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::routing {
namespace {

using discovery::PodSpec;

PodSpec spec(const std::string& name, std::vector<std::string> models, uint16_t port) {
  return testing::podSpec(name, port, std::move(models));
}

class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.routing.strategy = "least-request";
    config_.discovery.file = "p.yaml";
    pods_.update({spec("a", {"m"}, 1), spec("b", {"m"}, 2), spec("c", {"other"}, 3)});
    for (const auto& p : pods_.snapshot()->pods()) p->recordHealth(true, 1, 1);
    router_ = std::make_unique<Router>(StrategyRegistry::builtin(), StrategyDeps{config_}, pods_, [this] { return now_ms_; });
    request_.model = "m";
  }
  Decision choose(std::string_view header = "", std::string_view profile = "", bool dry = false) {
    RouteQuery q{request_, header, profile, {}, dry};
    return router_->choose(q, rng_);
  }
  config::Config config_;
  discovery::PodRegistry pods_;
  std::unique_ptr<Router> router_;
  openai::RequestView request_;
  std::mt19937_64 rng_{42};
  int64_t now_ms_ = 1000;
};

// least-request counts each choice at once, so back-to-back decisions alternate instead of piling up.
TEST_F(RouterTest, LeastRequestCountsAtTheMomentOfChoice) {
  std::vector<Decision> held;
  std::map<std::string, int> per_pod;
  for (int i = 0; i < 10; ++i) {
    held.push_back(choose());
    ASSERT_EQ(held.back().failure, RouteFailure::kNone);
    per_pod[held.back().pod->name()]++;
  }
  EXPECT_EQ(per_pod["a"], 5);
  EXPECT_EQ(per_pod["b"], 5);
  EXPECT_EQ(pods_.snapshot()->find("a")->signals().inFlight(), 5);
  held.clear();  // every guard releases its count
  EXPECT_EQ(pods_.snapshot()->find("a")->signals().inFlight(), 0);
  EXPECT_EQ(pods_.snapshot()->find("b")->signals().inFlight(), 0);
}

// Unknown model -> 404; no ready pod -> 503; unknown strategy -> 400 naming the valid ones.
TEST_F(RouterTest, TypedFailures) {
  request_.model = "nope";
  EXPECT_EQ(choose().failure, RouteFailure::kModelNotServed);
  EXPECT_EQ(openai::errorInfo(errorFor(RouteFailure::kModelNotServed)).status, 404);
  request_.model = "other";
  config_.health_check.panic_threshold_percent = 0;  // no panic routing: an ejected pod is out
  pods_.snapshot()->find("c")->eject(now_ms_ + 10);
  Decision d = choose();
  EXPECT_EQ(d.failure, RouteFailure::kNoReadyPod);
  EXPECT_EQ(openai::errorInfo(errorFor(d.failure)).status, 503);
  now_ms_ += 11;  // the ejection ends by itself
  EXPECT_EQ(choose().failure, RouteFailure::kNone);
  Decision bad = choose("fastest");
  EXPECT_EQ(bad.failure, RouteFailure::kUnknownStrategy);
  EXPECT_NE(bad.message.find("unknown routing strategy 'fastest' (valid: "), std::string::npos);
  EXPECT_NE(bad.message.find("least-request"), std::string::npos);
  EXPECT_NE(bad.message.find("random"), std::string::npos);
}

// Pods failing health checks or ejected are not candidates.
TEST_F(RouterTest, OnlyReadyPodsAreCandidates) {
  pods_.snapshot()->find("a")->recordHealth(false, 1, 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(choose().pod->name(), "b");
}

// Panic routing: below health_check.panic_threshold_percent ready, passive ejections are ignored (the model keeps
// being served), but pods failing their health checks and removed pods stay out.
TEST_F(RouterTest, PanicRoutesAmongHealthyPodsDespiteEjections) {
  config_.health_check.panic_threshold_percent = 50;
  auto a = pods_.snapshot()->find("a");
  auto b = pods_.snapshot()->find("b");
  a->eject(now_ms_ + 1000);  // 1 of 2 ready: 50% is not below the threshold
  for (int i = 0; i < 5; ++i) EXPECT_EQ(choose().pod->name(), "b");
  b->eject(now_ms_ + 1000);  // 0 of 2 ready: panic, both ejected pods are candidates again
  std::map<std::string, int> per_pod;
  std::vector<Decision> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(choose());
    ASSERT_EQ(held.back().failure, RouteFailure::kNone);
    per_pod[held.back().pod->name()]++;
  }
  EXPECT_EQ(per_pod["a"], 2);
  EXPECT_EQ(per_pod["b"], 2);
  b->recordHealth(false, 1, 1);  // b's engine says it is down: panic still leaves it out
  for (int i = 0; i < 3; ++i) EXPECT_EQ(choose().pod->name(), "a");
  a->recordHealth(false, 1, 1);
  EXPECT_EQ(choose().failure, RouteFailure::kNoReadyPod);
  config_.health_check.panic_threshold_percent = 0;  // 0 turns panic off
  a->recordHealth(true, 1, 1);
  EXPECT_EQ(choose().failure, RouteFailure::kNoReadyPod);
}

TEST(Panic, ThresholdCountsPodsNotRemoved) {
  std::vector<discovery::PodPtr> pods;
  for (uint16_t i = 0; i < 4; ++i) {
    pods.push_back(std::make_shared<discovery::PodState>(PodId{i + 1u}, spec("p" + std::to_string(i), {"m"}, i)));
    pods.back()->recordHealth(true, 1, 1);
  }
  pods[0]->eject(100);
  EXPECT_FALSE(panicking(pods, 50, 0));  // 3 of 4 ready
  pods[1]->eject(100);
  EXPECT_FALSE(panicking(pods, 50, 0));  // 2 of 4: not below 50%
  EXPECT_TRUE(panicking(pods, 51, 0));
  pods[2]->markRemoved();
  EXPECT_TRUE(panicking(pods, 50, 0));  // 1 of 3 live pods ready
  EXPECT_FALSE(panicking(pods, 50, 100));  // the ejections ended
}

// Excluded pods (already tried) are skipped.
TEST_F(RouterTest, ExcludedPodsAreSkipped) {
  PodId a = pods_.snapshot()->find("a")->id();
  std::vector<PodId> exclude{a};
  RouteQuery q{request_, "", "", exclude, false};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(router_->choose(q, rng_).pod->name(), "b");
}

// A preferred pod (the Responses API's chain affinity) is chosen whenever it is a candidate, against the strategy's
// best, and counted against like any pick; excluded or serving another model, the strategy's choice stands.
TEST_F(RouterTest, PreferredPodIsChosenWhileACandidate) {
  std::vector<Decision> held;
  for (int i = 0; i < 4; ++i) {
    RouteQuery q{request_, "", "", {}, false};
    q.preferred_pod = "a";
    held.push_back(router_->choose(q, rng_));
    ASSERT_EQ(held.back().failure, RouteFailure::kNone);
    EXPECT_EQ(held.back().pod->name(), "a");  // least-request alone would alternate a, b
    EXPECT_EQ(held.back().strategy, "least-request");
  }
  EXPECT_EQ(pods_.snapshot()->find("a")->signals().inFlight(), 4);
  std::vector<PodId> exclude{pods_.snapshot()->find("a")->id()};
  RouteQuery excluded{request_, "", "", exclude, false};
  excluded.preferred_pod = "a";
  EXPECT_EQ(router_->choose(excluded, rng_).pod->name(), "b");
  RouteQuery elsewhere{request_, "", "", {}, false};
  elsewhere.preferred_pod = "c";  // serves another model: never a candidate
  EXPECT_EQ(router_->choose(elsewhere, rng_).pod->name(), "b");
}

// Strategy precedence: locked > header > profile > model > default.
TEST_F(RouterTest, StrategyPrecedence) {
  EXPECT_EQ(choose().strategy, "least-request");
  config_.models["m"].routing_strategy = "random";
  EXPECT_EQ(choose().strategy, "random");
  config_.models["m"].routing_strategy = "";
  config_.models["m"].profiles["p"].routing_strategy = "random";
  EXPECT_EQ(choose("", "p").strategy, "random");
  EXPECT_EQ(choose("", "unknown-profile").strategy, "least-request");
  EXPECT_EQ(choose("least-request", "p").strategy, "least-request");
  config_.models["m"].locked_routing_strategy = "random";
  EXPECT_EQ(choose("least-request", "p").strategy, "random");
}

// A dry run decides without counting the request against the pod.
TEST_F(RouterTest, DryRunCountsNothing) {
  Decision d = choose("", "", true);
  ASSERT_TRUE(d.pod);
  EXPECT_EQ(d.pod->signals().inFlight(), 0);
  EXPECT_EQ(d.candidates.size(), 2u);
}

// random spreads over all candidates.
TEST_F(RouterTest, RandomReachesEveryPod) {
  std::map<std::string, int> seen;
  for (int i = 0; i < 200; ++i) seen[choose("random").pod->name()]++;
  EXPECT_GT(seen["a"], 50);
  EXPECT_GT(seen["b"], 50);
}

// Hop-by-hop headers are recognised case-insensitively; end-to-end ones are not.
TEST(HopByHop, Recognised) {
  EXPECT_TRUE(proxy::isHopByHop("Connection"));
  EXPECT_TRUE(proxy::isHopByHop("transfer-encoding"));
  EXPECT_TRUE(proxy::isHopByHop("Keep-Alive"));
  EXPECT_FALSE(proxy::isHopByHop("authorization"));
  EXPECT_FALSE(proxy::isHopByHop("content-type"));
}

}  // namespace
}  // namespace prefixgate::routing
