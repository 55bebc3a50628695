#include "discovery/passive_ejection.h"

#include <gtest/gtest.h>

#include <memory>

#include "proxy/pod_health.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::discovery {
namespace {

config::HealthCheckConfig policy() {
  config::HealthCheckConfig cfg;
  cfg.passive_failure_threshold = 2;
  cfg.distinct_request_failures = 3;
  cfg.eject_base_ms = 100;
  cfg.eject_max_ms = 1000;
  return cfg;
}

// One request failing again and again never ejects a pod; three different requests failing in a row do.
TEST(PassiveEjection, OnlyDifferentRequestsInARowEject) {
  PassiveEjection p;
  const auto cfg = policy();
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(p.requestFailed(7, cfg));
  EXPECT_FALSE(p.requestFailed(8, cfg));
  EXPECT_TRUE(p.requestFailed(9, cfg));
  EXPECT_EQ(p.ejected(cfg), 100);
  EXPECT_FALSE(p.requestFailed(9, cfg));  // a new streak after the ejection
}

// A success between failures ends the streak.
TEST(PassiveEjection, SuccessEndsTheStreaks) {
  PassiveEjection p;
  const auto cfg = policy();
  EXPECT_FALSE(p.requestFailed(1, cfg));
  EXPECT_FALSE(p.requestFailed(2, cfg));
  EXPECT_FALSE(p.podFailed(cfg));
  EXPECT_FALSE(p.clean());
  p.succeeded();
  EXPECT_TRUE(p.clean());
  EXPECT_FALSE(p.requestFailed(3, cfg));
  EXPECT_FALSE(p.podFailed(cfg));
  EXPECT_TRUE(p.podFailed(cfg));
}

// The back-off doubles per ejection in a row up to eject_max_ms; a success resets it.
TEST(PassiveEjection, BackOffDoublesAndResets) {
  PassiveEjection p;
  const auto cfg = policy();
  EXPECT_EQ(p.ejected(cfg), 100);
  EXPECT_EQ(p.ejected(cfg), 200);
  EXPECT_EQ(p.ejected(cfg), 400);
  EXPECT_EQ(p.ejected(cfg), 800);
  EXPECT_EQ(p.ejected(cfg), 1000);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(p.ejected(cfg), 1000);  // no overflow past many doublings
  p.succeeded();
  EXPECT_EQ(p.ejected(cfg), 100);
}

// A streak held at the threshold while ejection is refused stays bounded and still asks.
TEST(PassiveEjection, RefusedEjectionKeepsAsking) {
  PassiveEjection p;
  const auto cfg = policy();
  p.requestFailed(1, cfg);
  p.requestFailed(2, cfg);
  for (uint64_t h = 3; h < 1000; ++h) EXPECT_TRUE(p.requestFailed(h, cfg));
}

class PodHealthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = policy();
    cfg_.passive_failure_threshold = 1;
    pods_.update({testing::podSpec("a", 1, {"m"}), testing::podSpec("b", 2, {"m"}), testing::podSpec("c", 3, {"m"}),
                  testing::podSpec("d", 4, {"m", "solo"})});
    for (const auto& p : pods_.snapshot()->pods()) p->recordHealth(true, 1, 1);
  }
  PodPtr pod(const std::string& name) { return pods_.snapshot()->find(name); }
  config::HealthCheckConfig cfg_;
  PodRegistry pods_;
  int64_t now_ms_ = 1000;
  proxy::PodHealth health_{pods_, cfg_, [this] { return now_ms_; }};
};

// max_ejection_percent: ejections stop once they would leave more than that share of a model's pods ejected
// (every model the pod serves counts: d is the only pod of "solo", so it is never ejected at 50%).
TEST_F(PodHealthTest, EjectionIsCappedPerModel) {
  cfg_.max_ejection_percent = 50;
  health_.podFailed(*pod("a"));
  EXPECT_FALSE(pod("a")->ready(now_ms_));
  health_.podFailed(*pod("b"));
  EXPECT_FALSE(pod("b")->ready(now_ms_));  // 2 of 4 ejected: 50%
  health_.podFailed(*pod("c"));
  EXPECT_TRUE(pod("c")->ready(now_ms_));  // 3 of 4 would be 75%
  now_ms_ += 100;  // a's and b's ejections end
  health_.podFailed(*pod("c"));
  EXPECT_FALSE(pod("c")->ready(now_ms_));
  health_.podFailed(*pod("d"));
  EXPECT_TRUE(pod("d")->ready(now_ms_));  // the only pod of "solo"
  cfg_.max_ejection_percent = 100;
  health_.podFailed(*pod("d"));
  EXPECT_FALSE(pod("d")->ready(now_ms_));
}

// Removed pods do not count towards the share.
TEST_F(PodHealthTest, RemovedPodsDoNotCount) {
  cfg_.max_ejection_percent = 50;
  pods_.update({testing::podSpec("a", 1, {"m"}), testing::podSpec("b", 2, {"m"})});
  health_.podFailed(*pod("a"));
  EXPECT_FALSE(pod("a")->ready(now_ms_));
  EXPECT_FALSE(proxy::ejectionAllowed(*pods_.snapshot(), *pod("b"), 50, now_ms_));
}

// Suspect failures eject only after distinct_request_failures different requests; a success in between resets.
TEST_F(PodHealthTest, SuspectFailuresNeedDifferentRequests) {
  for (int i = 0; i < 10; ++i) health_.requestFailed(*pod("a"), 42);
  EXPECT_TRUE(pod("a")->ready(now_ms_));
  health_.requestFailed(*pod("a"), 43);
  health_.succeeded(*pod("a"));
  health_.requestFailed(*pod("a"), 44);
  EXPECT_TRUE(pod("a")->ready(now_ms_));
  health_.requestFailed(*pod("a"), 45);
  health_.requestFailed(*pod("a"), 46);
  EXPECT_FALSE(pod("a")->ready(now_ms_));
}

}  // namespace
}  // namespace prefixgate::discovery
