#include "routing/prefix/selection.h"

#include <gtest/gtest.h>

#include <random>

#include "routing/load_score.h"

namespace prefixgate::routing {
namespace {

std::vector<Candidate> withLoads(std::vector<int32_t> loads) {
  std::vector<Candidate> out;
  for (size_t i = 0; i < loads.size(); ++i) out.push_back(Candidate{nullptr, PodId{static_cast<uint32_t>(i + 1)}, loads[i]});
  return out;
}

// The Router's pick: highest score, then fewer in flight (the remaining ties are random there; here, first).
size_t pick(const std::vector<Candidate>& c) {
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i)
    if (c[i].score > c[best].score || (c[i].score == c[best].score && c[i].in_flight < c[best].in_flight)) best = i;
  return best;
}

// AIBrix case: loads {100,10,12}, matches {100,80,60}, factor 1 -> the pod with load 10.
TEST(Standalone, SkipsTheOverloadedBestMatch) {
  auto c = withLoads({100, 10, 12});
  std::vector<uint32_t> matched{10, 8, 6};
  EXPECT_EQ(standaloneScores(c, matched, 10, 1.0), kPrefixMatch);
  EXPECT_EQ(pick(c), 1u);
  EXPECT_EQ(c[0].match_percent, 100);
  EXPECT_EQ(c[2].match_percent, 60);
}

// AIBrix case: loads {1,10,1,4}, matches {p1:50, p2:100} -> p1 (p2 is over mean + sigma).
TEST(Standalone, PicksTheMatchedPodUnderTheThreshold) {
  auto c = withLoads({1, 10, 1, 4});
  std::vector<uint32_t> matched{1, 2, 0, 0};
  EXPECT_EQ(standaloneScores(c, matched, 2, 1.0), kPrefixMatch);
  EXPECT_EQ(pick(c), 0u);
}

// AIBrix case: factor -10 -> no pod passes -> least-request fallback (outcome prefix_match_skipped).
TEST(Standalone, NegativeFactorFallsBackToLeastRequest) {
  auto c = withLoads({1, 10, 0, 4});
  std::vector<uint32_t> matched{1, 2, 0, 0};
  EXPECT_EQ(standaloneScores(c, matched, 2, -10.0), kPrefixMatchSkipped);
  EXPECT_EQ(pick(c), 2u);
}

// No pod holds a match -> least-request fallback.
TEST(Standalone, NoMatchFallsBackToLeastRequest) {
  auto c = withLoads({3, 1, 2});
  std::vector<uint32_t> matched{0, 0, 0};
  EXPECT_EQ(standaloneScores(c, matched, 4, 2.0), kLeastRequestFallback);
  EXPECT_EQ(pick(c), 1u);
}

// Among equal matches the less loaded wins.
TEST(Standalone, EqualMatchesPreferLessLoad) {
  auto c = withLoads({2, 1, 5});
  std::vector<uint32_t> matched{4, 4, 0};
  standaloneScores(c, matched, 4, 2.0);
  EXPECT_EQ(pick(c), 1u);
}

const config::LoadBalanceConfig kLoad{};

// The blend uses the match fraction itself: a 5 % match stays weak (min-max would have made it 1.0).
TEST(Blend, SmallMatchIsNotStretched) {
  auto c = withLoads({0, 0});
  std::vector<uint32_t> matched{1, 0};
  blendScores(c, matched, 20, 5, 4, kLoad);
  EXPECT_NEAR(c[0].score, (5 * 0.05 + 4 * 1.0) / 9, 1e-9);
  EXPECT_NEAR(c[1].score, 4.0 / 9, 1e-9);
  EXPECT_EQ(c[0].match_percent, 5);
}

// Load is normalised so the least loaded gets 1 and the most loaded 0; a full match outweighs load by default
// weights, while with no match the least loaded wins.
TEST(Blend, LoadNormalisedMinMax) {
  auto c = withLoads({4, 0, 2});
  std::vector<uint32_t> none{0, 0, 0};
  blendScores(c, none, 8, 5, 4, kLoad);
  EXPECT_NEAR(c[0].score, 0.0, 1e-9);
  EXPECT_NEAR(c[1].score, 4.0 / 9, 1e-9);
  EXPECT_NEAR(c[2].score, 2.0 / 9, 1e-9);
  EXPECT_EQ(outcomeOfBlend(c, pick(c)), kLeastRequestFallback);
  std::vector<uint32_t> first_holds{8, 0, 0};
  blendScores(c, first_holds, 8, 5, 4, kLoad);
  EXPECT_EQ(pick(c), 0u);
  EXPECT_EQ(outcomeOfBlend(c, 0), kPrefixMatch);
  // With load weighted above prefix, the idle pod wins instead.
  blendScores(c, first_holds, 8, 1, 4, kLoad);
  EXPECT_EQ(pick(c), 1u);
  EXPECT_EQ(outcomeOfBlend(c, 1), kPrefixMatchSkipped);
}

// All loads equal: every load score is 1, so prefix decides.
TEST(Blend, EqualLoadsLetPrefixDecide) {
  auto c = withLoads({3, 3, 3});
  std::vector<uint32_t> matched{1, 3, 2};
  blendScores(c, matched, 4, 5, 4, kLoad);
  EXPECT_EQ(pick(c), 1u);
}

// The capacity-aware score: (running + lambda*waiting)/capacity * (1 + alpha*(1-kv_free)^2), infinite below
// kv_critical.
TEST(LoadScore, CapacityAwareFormula) {
  config::LoadBalanceConfig cfg{0.5, 2.0, 0.1};
  EXPECT_DOUBLE_EQ(capacityLoadScore(4, 2, 2, 1.0, cfg), 2.5);
  EXPECT_DOUBLE_EQ(capacityLoadScore(4, 0, 1, 0.5, cfg), 4 * 1.5);
  EXPECT_TRUE(std::isinf(capacityLoadScore(0, 0, 1, 0.05, cfg)));
  EXPECT_DOUBLE_EQ(capacityLoadScore(3, 0, 0, 1.0, cfg), 3);  // no capacity known counts as 1
}

std::vector<int32_t> gate(std::vector<int32_t> loads) {
  auto c = withLoads(loads);
  applyImbalanceGate(c, config::LoadImbalanceConfig{8, 2.0});
  std::vector<int32_t> out;
  for (const auto& x : c) out.push_back(x.in_flight);
  return out;
}

// AIBrix's imbalance-gate cases (threshold 8): {0,8} no; {0,9} yes; {1,2,3,9} no; {2,2,8,16} yes (the 2s stay).
TEST(ImbalanceGate, AIBrixCases) {
  EXPECT_EQ(gate({0, 8}), (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(gate({0, 9}), (std::vector<int32_t>{0}));
  EXPECT_EQ(gate({1, 2, 3, 9}), (std::vector<int32_t>{1, 2, 3, 9}));
  EXPECT_EQ(gate({2, 2, 8, 16}), (std::vector<int32_t>{2, 2}));
  // The relative condition: a large gap among uniformly busy pods does not fire.
  EXPECT_EQ(gate({20, 30, 40}), (std::vector<int32_t>{20, 30, 40}));
}

}  // namespace
}  // namespace prefixgate::routing
