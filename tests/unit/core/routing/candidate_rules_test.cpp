// The pure functions every strategy shares (the Router's filter, the in-flight context count, the prompt-size
// estimate) and the cost rules of prefill-cost, the blend's prefill term and prefix-cache-preble, on hand-made
// pod states and candidates.
#include <gtest/gtest.h>

#include <cmath>

#include "openai/request.h"
#include "routing/load_guards.h"
#include "routing/load_score.h"
#include "routing/prefix/selection.h"
#include "routing/router.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::routing {
namespace {

class FilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pods_.update({testing::podSpec("a", 1), testing::podSpec("b", 2), testing::podSpec("c", 3), testing::podSpec("d", 4)});
    for (const auto& p : pods_.snapshot()->pods()) p->recordHealth(true, 1, 1);
  }
  discovery::PodPtr pod(const std::string& name) { return pods_.snapshot()->find(name); }
  FilteredCandidates filter(const CandidateFilter& f) { return filterCandidates(*pods_.snapshot()->podsFor("m"), f); }
  static std::vector<std::string> names(const std::vector<Candidate>& cs) {
    std::vector<std::string> out;
    for (const Candidate& c : cs) out.push_back(c.pod->name());
    return out;
  }
  discovery::PodRegistry pods_;
};

// Ensures the filter keeps ready pods only, skips excluded ones, and counts (without listing) pods at the
// per-pod bound.
TEST_F(FilterTest, ReadyNotExcludedUnderTheBound) {
  pod("b")->recordHealth(false, 1, 1);
  InFlightGuard g1(pod("c")), g2(pod("c"));
  const PodId excluded[] = {pod("d")->id()};
  CandidateFilter f;
  f.exclude = excluded;
  f.max_in_flight_per_pod = 2;
  FilteredCandidates out = filter(f);
  EXPECT_EQ(names(out.candidates), (std::vector<std::string>{"a"}));
  EXPECT_EQ(out.full, 1u);
  f.max_in_flight_per_pod = 0;
  EXPECT_EQ(names(filter(f).candidates), (std::vector<std::string>{"a", "c"}));
}

// Ensures a pod whose engine reports a nearly full KV cache leaves the candidates for `excluded` (marked), unless
// every pod's is, and that a severe skew of in-flight counts keeps only the least loaded.
TEST_F(FilterTest, KvCriticalAndImbalanceGate) {
  engine::EngineSnapshot nearly_full;
  nearly_full.valid = true;
  nearly_full.scraped_at_ms = 1000;
  nearly_full.kv_usage = 0.95;
  nearly_full.has_kv_usage = true;
  pod("b")->engine().publish(nearly_full);
  CandidateFilter f;
  f.now_ms = 1000;
  f.max_engine_age_ms = 5000;
  FilteredCandidates out = filter(f);
  EXPECT_EQ(names(out.candidates), (std::vector<std::string>{"a", "c", "d"}));
  ASSERT_EQ(out.excluded.size(), 1u);
  EXPECT_EQ(out.excluded[0].pod->name(), "b");
  EXPECT_TRUE(out.excluded[0].excluded);
  std::vector<InFlightGuard> held;
  for (int i = 0; i < 20; ++i) held.emplace_back(pod("a"));
  held.emplace_back(pod("c"));
  EXPECT_EQ(names(filter(f).candidates), (std::vector<std::string>{"d"}));  // a: 20 against c: 1, d: 0
}

// Ensures each request's prompt tokens count against its pod while it is in flight (released with its guard),
// and that with state sync the other replicas' requests count at this gateway's mean context per request.
TEST_F(FilterTest, InFlightTokensFollowTheGuards) {
  {
    InFlightGuard g1(pod("a"), 300), g2(pod("a"), 100), g3(pod("b"), 200);
    EXPECT_EQ(pod("a")->signals().inFlightTokens(), 400);
    FilteredCandidates out = filter({});
    EXPECT_DOUBLE_EQ(out.candidates[0].in_flight_tokens, 400);
    EXPECT_DOUBLE_EQ(out.candidates[1].in_flight_tokens, 200);
    pod("c")->signals().setRemoteInFlight(3, 1);  // another replica has 3 requests on c: 3 x (600 / 3)
    out = filter({});
    EXPECT_DOUBLE_EQ(out.candidates[2].in_flight_tokens, 600);
    InFlightGuard moved = std::move(g1);
    EXPECT_EQ(pod("a")->signals().inFlightTokens(), 400);  // a moved guard releases once
  }
  EXPECT_EQ(pod("a")->signals().inFlightTokens(), 0);
  EXPECT_EQ(pod("b")->signals().inFlightTokens(), 0);
}

// Ensures the prompt-size estimate uses token ids when there are any, else ~4 bytes of text per token.
TEST(EstimatedPromptTokens, TokenIdsElseTextLength) {
  openai::RequestView r;
  r.prompt_text = std::string(401, 'x');
  EXPECT_EQ(estimatedPromptTokens(r), 101);
  r.has_token_ids = true;
  r.prompt_token_ids = {1, 2, 3};
  EXPECT_EQ(estimatedPromptTokens(r), 3);
  r.remote_token_ids = std::make_shared<const std::vector<uint32_t>>(std::vector<uint32_t>(7, 1));
  EXPECT_EQ(estimatedPromptTokens(r), 7);
}

std::vector<Candidate> candidates(std::vector<int32_t> in_flight, std::vector<double> tokens) {
  std::vector<Candidate> out;
  for (size_t i = 0; i < in_flight.size(); ++i) {
    out.push_back(Candidate{nullptr, PodId{uint32_t(i + 1)}, in_flight[i]});
    out.back().in_flight_tokens = tokens[i];
  }
  return out;
}

// Ensures prefill-cost's cost is prefill_weight x blocks to compute + blocks of context in flight.
TEST(PrefillCost, BlocksToComputePlusContextInFlight) {
  std::vector<Candidate> cs = candidates({1, 0, 3}, {64, 0, 16});
  const uint32_t matched[] = {10, 0, 4};
  double cost[3];
  prefillCosts(cs, matched, 10, 16, 1.0, cost);
  EXPECT_DOUBLE_EQ(cost[0], 0 + 4);   // all cached, 64 tokens = 4 blocks in flight
  EXPECT_DOUBLE_EQ(cost[1], 10 + 0);  // nothing cached, idle
  EXPECT_DOUBLE_EQ(cost[2], 6 + 1);
  prefillCosts(cs, matched, 10, 16, 0.25, cost);
  EXPECT_DOUBLE_EQ(cost[1], 2.5);  // a lighter prefill weight favours the idle pod
  EXPECT_DOUBLE_EQ(cost[0], 4);
}

// Ensures the blend's prefill term is normalised (cheapest 1, dearest 0) and weighed beside the others, and that
// without it the blend is unchanged.
TEST(PrefillCost, BlendTerm) {
  config::LoadBalanceConfig lb;
  std::vector<Candidate> without = candidates({0, 0}, {0, 0});
  std::vector<Candidate> with = without;
  const uint32_t matched[] = {0, 0};
  const double costs[] = {2, 10};
  blendScores(without, matched, 4, 1, 1, lb);
  EXPECT_DOUBLE_EQ(without[0].score, without[1].score);
  blendScores(with, matched, 4, 1, 1, lb, costs, 2);
  EXPECT_DOUBLE_EQ(with[0].score, (0 + 1 + 2 * 1.0) / 4);
  EXPECT_DOUBLE_EQ(with[1].score, (0 + 1 + 2 * 0.0) / 4);
}

// Ensures Preble's three rules: exploit when the cached part is longer than the rest (the least-loaded holder),
// explore otherwise (window load + missed prefill + decode), rebalance past the load ratio (the least loaded).
TEST(Preble, ExploitExploreRebalance) {
  PrebleParams params{.decode_token_cost = 2, .rebalance_ratio = 1.5};
  std::vector<Candidate> cs = candidates({0, 0, 0}, {0, 0, 0});
  std::mt19937_64 rng(1);
  {
    const double cached[] = {60, 60, 10};  // 60 of 100 tokens: exploit among a and b, the less loaded
    const double load[] = {120, 100, 90};
    EXPECT_EQ(prebleScores(cs, cached, 100, load, 5, params), kPrebleExploit);
    EXPECT_EQ(pickBest(cs, rng), 1u);
    EXPECT_EQ(cs[0].match_percent, 60);
  }
  {
    const double cached[] = {40, 0, 0};  // 40 of 100: explore: a 120 + 60, b 100 + 100, c 110 + 100 (+ 10 each)
    const double load[] = {120, 100, 110};
    EXPECT_EQ(prebleScores(cs, cached, 100, load, 5, params), kPrebleExplore);
    EXPECT_EQ(pickBest(cs, rng), 0u);
    EXPECT_DOUBLE_EQ(cs[0].load_score, 120 + 60 + 10);
  }
  {
    const double cached[] = {90, 0, 0};  // would exploit a, but 160 > 1.5 x 100: the least loaded, c
    const double load[] = {160, 120, 100};
    EXPECT_EQ(prebleScores(cs, cached, 100, load, 5, params), kPrebleRebalance);
    EXPECT_EQ(pickBest(cs, rng), 2u);
  }
}

// Ensures Preble's rebalance needs the absolute gap too (issue 24): over near-zero loads (one request's work on
// one pod of an idle fleet) the ratio alone fired and sent a prompt away from the pod holding it; past the gap it
// still fires.
TEST(Preble, RebalanceNeedsTheMinimumGap) {
  PrebleParams params{.decode_token_cost = 10, .rebalance_ratio = 1.5, .rebalance_min_gap = 8 * (1000 + 2560)};
  std::vector<Candidate> cs = candidates({0, 0, 0, 0}, {0, 0, 0, 0});
  std::mt19937_64 rng(1);
  const double cached[] = {0, 0, 990, 0};  // the holder of 990 of 1,000 tokens
  {
    const double load[] = {0, 0, 1000 + 2560, 0};  // one request on an idle fleet: infinitely skewed, yet small
    EXPECT_EQ(prebleScores(cs, cached, 1000, load, 256, params), kPrebleExploit);
    EXPECT_EQ(pickBest(cs, rng), 2u);
  }
  {
    const double load[] = {0, 0, 8 * (1000 + 2560) + 1, 0};  // just past the gap
    EXPECT_EQ(prebleScores(cs, cached, 1000, load, 256, params), kPrebleRebalance);
    EXPECT_NE(pickBest(cs, rng), 2u);
  }
  {
    const double load[] = {60000, 60000, 89000, 60000};  // past the gap but within the ratio: exploit
    EXPECT_EQ(prebleScores(cs, cached, 1000, load, 256, params), kPrebleExploit);
  }
}

}  // namespace
}  // namespace prefixgate::routing
