// Decisions at large fleets (routing.max_scored_pods, routing.sampled_pods; routing/pod_sample.h): above the
// threshold a decision scores the pods holding a prefix match plus a bounded random sample of the others; at or
// below it, every pod, as before.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "unit/core/pod_specs.h"
#include "unit/core/prefix_router_fixture.h"

namespace prefixgate::routing {
namespace {

std::vector<discovery::PodSpec> fleet(size_t n, size_t first = 0) {
  std::vector<discovery::PodSpec> specs;
  for (size_t i = first; i < first + n; ++i)
    specs.push_back(testing::podSpec("p" + std::to_string(i), static_cast<uint16_t>(1000 + i)));
  return specs;
}

// prefix-cache (the wait scorer, the default) over a fleet of `n` pods, character tokenizer (4 characters a block).
class SampledDecisionTest : public testing::PrefixRouterTest {
 protected:
  void startFleet(size_t n) {
    start(fleet(n));
    request_.model = "m";
  }
  Decision choose(const std::string& prompt, std::string_view strategy = "") {
    request_.prompt_text = prompt;
    return router_->choose(RouteQuery{request_, strategy, "", {}, false}, rng_);
  }
  discovery::PodPtr pod(const std::string& name) { return pods_.snapshot()->find(name); }
};

const std::string kPrefix = "aaaabbbbccccddddeeeeffffgggghhhhiiiijjjjkkkkllll";  // 12 blocks

// Ensures that above the threshold the pod holding the prompt's longest prefix is scored and wins (its load
// permits: the fleet is idle), while the decision scores no more than it and routing.sampled_pods others.
TEST_F(SampledDecisionTest, ThePodWithTheLongestMatchWinsAndTheSampleIsBounded) {
  startFleet(300);
  const std::string holder = choose(kPrefix + "first question").pod->name();
  for (int i = 0; i < 20; ++i) {
    Decision d = choose(kPrefix + "question " + std::to_string(i));
    ASSERT_EQ(d.failure, RouteFailure::kNone);
    EXPECT_EQ(d.pod->name(), holder) << "decision " << i;
    EXPECT_GT(d.match_percent, 50);
    EXPECT_LE(d.candidates.size(), 1 + config_.routing.sampled_pods);
    EXPECT_GE(d.candidates.size(), config_.routing.sampled_pods);  // the sample is drawn in full on an idle fleet
  }
  // A prompt nobody holds: the sample alone.
  Decision fresh = choose("zzzzyyyyxxxxwwww new conversation");
  EXPECT_EQ(fresh.candidates.size(), config_.routing.sampled_pods);
  EXPECT_EQ(fresh.match_percent, 0);
}

// Ensures that holders beyond routing.max_scored_pods are cut to the longest matches, so the pod with the
// longest one is still scored and chosen, and the decision stays bounded.
TEST_F(SampledDecisionTest, ManyHoldersAreCutToTheLongestMatches) {
  startFleet(40);
  config_.routing.max_scored_pods = 4;
  config_.routing.sampled_pods = 2;
  request_.prompt_text = kPrefix;
  PromptBlocks blocks;
  services_->hashPrompt(request_, blocks);
  ASSERT_EQ(blocks.hashes.size(), 12u);
  // p0..p19 hold 1..20 blocks' worth (at most 11); p7 alone holds all 12.
  for (size_t i = 0; i < 20; ++i) {
    const size_t held = i == 7 ? 12 : 1 + i % 11;
    ASSERT_TRUE(services_->index().record("m", std::span(blocks.hashes).first(held), pod("p" + std::to_string(i))->id()));
  }
  for (int i = 0; i < 10; ++i) {
    Decision d = choose(kPrefix + "q" + std::to_string(i));
    ASSERT_EQ(d.failure, RouteFailure::kNone);
    EXPECT_EQ(d.pod->name(), "p7");
    EXPECT_LE(d.candidates.size(), 4u + 2u);
  }
}

// Ensures a lightly loaded pod without a match is chosen when the holder's queue costs more than the prompt's
// prefill: the sample gives the strategy somewhere else to go.
TEST_F(SampledDecisionTest, ALightlyLoadedPodWithoutAMatchCanBeChosen) {
  startFleet(200);
  const discovery::PodPtr holder = pod(choose(kPrefix + "first question").pod->name());
  holder->signals().addPrefill(10'000'000);  // ten million tokens queued ahead of the next request there
  Decision d = choose(kPrefix + "second question");
  ASSERT_EQ(d.failure, RouteFailure::kNone);
  EXPECT_NE(d.pod, holder);
  EXPECT_EQ(d.match_percent, 0);
  EXPECT_LE(d.candidates.size(), 1 + config_.routing.sampled_pods);
  holder->signals().releasePrefill(10'000'000);
}

// Ensures the sample is drawn anew for each decision: load-only decisions over an idle fleet reach most pods
// (a fixed sample would reach sampled_pods of them).
TEST_F(SampledDecisionTest, EachDecisionDrawsANewSample) {
  startFleet(100);
  std::set<std::string> chosen;
  for (int i = 0; i < 400; ++i) chosen.insert(choose("", "least-request").pod->name());
  EXPECT_GT(chosen.size(), 60u);
}

// Ensures the pods cached per snapshot follow the pod set: a pod added is drawn (it is the only idle one), a pod
// removed is never chosen again, though it held the prompt.
TEST_F(SampledDecisionTest, APodSetChangeIsSeenByTheNextDecision) {
  startFleet(100);
  config_.routing.sampled_pods = 64;
  for (const auto& p : pods_.snapshot()->pods()) p->signals().addInFlight();
  EXPECT_EQ(choose("", "least-request").failure, RouteFailure::kNone);  // builds this thread's cache
  std::vector<discovery::PodSpec> grown = fleet(100);
  grown.push_back(testing::podSpec("fresh", 2000));
  pods_.update(grown);
  pod("fresh")->recordHealth(true, 1, 1);
  bool fresh = false;
  for (int i = 0; i < 30 && !fresh; ++i) fresh = choose("", "least-request").pod->name() == "fresh";
  EXPECT_TRUE(fresh) << "the pod added was never drawn";
  for (const auto& p : pods_.snapshot()->pods())
    if (p->name() != "fresh") p->signals().releaseInFlight();

  const std::string holder = choose(kPrefix + "first question").pod->name();
  std::vector<discovery::PodSpec> shrunk;
  for (discovery::PodSpec& s : grown)
    if (s.name != holder) shrunk.push_back(s);
  pods_.update(shrunk);
  for (int i = 0; i < 50; ++i) {
    Decision d = choose(kPrefix + "question " + std::to_string(i));
    ASSERT_EQ(d.failure, RouteFailure::kNone);
    EXPECT_NE(d.pod->name(), holder);
  }
}

// Ensures decisions at or below the threshold, with it off, and for session-affinity (whose pinned pod must be
// seen wherever it is) score every pod, as before sampling.
TEST_F(SampledDecisionTest, EveryPodIsScoredAtOrBelowTheThresholdOrWhenOff) {
  startFleet(64);
  EXPECT_EQ(choose(kPrefix).candidates.size(), 64u);
  EXPECT_EQ(choose("", "least-request").candidates.size(), 64u);
  pods_.update(fleet(65));
  for (const auto& p : pods_.snapshot()->pods()) p->recordHealth(true, 1, 1);
  EXPECT_LE(choose(kPrefix).candidates.size(), 1 + config_.routing.sampled_pods);
  EXPECT_EQ(choose("", "session-affinity").candidates.size(), 65u);
  config_.routing.max_scored_pods = 0;
  EXPECT_EQ(choose(kPrefix).candidates.size(), 65u);
}

// Ensures a decision falls back to every pod when the draws find too few usable ones: a fleet where all but one
// pod are ejected still routes to that one.
TEST_F(SampledDecisionTest, AFleetOfMostlyUnreadyPodsIsFilteredWhole) {
  startFleet(200);
  config_.health_check.panic_threshold_percent = 0;  // no panic routing: ejected pods are out
  for (const auto& p : pods_.snapshot()->pods())
    if (p->name() != "p123") p->eject(now_ms_ + 60'000);
  for (int i = 0; i < 5; ++i) {
    Decision d = choose(kPrefix + std::to_string(i));
    ASSERT_EQ(d.failure, RouteFailure::kNone);
    EXPECT_EQ(d.pod->name(), "p123");
  }
}

}  // namespace
}  // namespace prefixgate::routing
