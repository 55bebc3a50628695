#include <gtest/gtest.h>

#include <map>
#include <set>

#include "routing/load_guards.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/router.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::routing {
namespace {

class FakeClock : public Clock {
 public:
  SteadyTime now() const override { return now_; }
  SteadyTime now_{std::chrono::hours(1)};
};

discovery::PodSpec spec(const std::string& name, uint16_t port) {
  return testing::podSpec(name, port);
}

// The prefix-cache strategy end to end through the Router, on the real index and the character tokenizer.
class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.discovery.file = "p.yaml";
    config_.routing.strategy = "prefix-cache";
    config_.routing.prefix_cache.block_size = 4;
    build();
  }
  void build() {
    index::PrefixIndexOptions options;
    options.block_capacity = 1000;
    options.expiry = std::chrono::minutes(20);
    services_ = std::make_unique<PrefixServices>(std::make_unique<tokenize::CharacterTokenizer>(),
                                                 config_.routing.prefix_cache.block_size, 0, options, &clock_);
    metrics_ = std::make_unique<PrefixMetrics>(registry_);
    pods_ = std::make_unique<discovery::PodRegistry>();
    pods_->update({spec("a", 1), spec("b", 2), spec("c", 3)});
    for (const auto& p : pods_->snapshot()->pods()) p->recordHealth(true, 1, 1);
    router_ = std::make_unique<Router>(StrategyRegistry::builtin(), StrategyDeps{config_, services_.get(), metrics_.get()},
                                       *pods_, [] { return 0; });
  }
  Decision route(const std::string& prompt, bool dry = false) {
    openai::RequestView r;
    r.model = "m";
    r.prompt_text = prompt;
    RouteQuery q{r, "", "", {}, dry};
    return router_->choose(q, rng_);
  }
  config::Config config_;
  FakeClock clock_;
  prometheus::Registry registry_;
  std::unique_ptr<PrefixServices> services_;
  std::unique_ptr<PrefixMetrics> metrics_;
  std::unique_ptr<discovery::PodRegistry> pods_;
  std::unique_ptr<Router> router_;
  std::mt19937_64 rng_{7};
};

// Ensures the gateway's prefix index is built chained (its hashes come from hashBlocks), so that routing searches a
// long prompt's blocks instead of visiting each one, whatever options the caller passed.
TEST_F(PrefixCacheTest, IndexSearchesChains) {
  EXPECT_TRUE(services_->index().searchesChains());
  EXPECT_EQ(services_->index().refreshInterval(), std::chrono::milliseconds(100));
  std::string error;
  config_.routing.prefix_cache.tokenizer = "character";
  auto created = PrefixServices::create(config_, error);
  ASSERT_TRUE(created) << error;
  EXPECT_TRUE(created->index().searchesChains());
}

// A request sharing a recorded prefix goes to the pod that holds it, with its match percent reported.
TEST_F(PrefixCacheTest, FollowsTheRecordedPrefix) {
  Decision first = route("aaaabbbbccccdddd");
  ASSERT_EQ(first.failure, RouteFailure::kNone);
  EXPECT_EQ(first.match_percent, 0);
  std::string holder = first.pod->name();
  first = Decision{};  // request done: in-flight back to 0
  Decision second = route("aaaabbbbccccXXXX");
  EXPECT_EQ(second.pod->name(), holder);
  EXPECT_EQ(second.match_percent, 75);
  EXPECT_EQ(second.outcome, "prefix_match");
  EXPECT_TRUE(second.details.empty());  // filled for /debug/route's dry runs only
  // 16 characters (the character tokenizer's tokens) are 4 engine tokens at the default 4 bytes per token.
  Decision explained = route("aaaabbbbccccXXXX", true);
  EXPECT_EQ(explained.details, (std::vector<std::pair<std::string, int64_t>>{
                                   {"tokens", 16}, {"engine_tokens", 4}, {"blocks", 4}}));
}

// A dry run (/debug/route) records nothing: the next real request still sees no match.
TEST_F(PrefixCacheTest, DryRunRecordsNothing) {
  route("zzzzyyyy", true);
  EXPECT_EQ(route("zzzzyyyy").match_percent, 0);
}

// A prompt shorter than one block matches nothing and still routes.
TEST_F(PrefixCacheTest, ShortPromptRoutes) {
  Decision d = route("abc");
  ASSERT_EQ(d.failure, RouteFailure::kNone);
  EXPECT_EQ(d.match_percent, 0);
}

// A burst of identical new prompts (each request still in flight) does not all land on one pod.
TEST_F(PrefixCacheTest, BurstOfIdenticalPromptsSpreads) {
  std::vector<Decision> held;
  std::map<std::string, int> per_pod;
  for (int i = 0; i < 50; ++i) {
    held.push_back(route("the same brand new system prompt, again and again"));
    per_pod[held.back().pod->name()]++;
  }
  EXPECT_EQ(per_pod.size(), 3u);
  for (const auto& [pod, n] : per_pod) EXPECT_LT(n, 30) << pod;
}

// A removed pod's entries stop matching at once.
TEST_F(PrefixCacheTest, RemovedPodStopsMatching) {
  Decision first = route("qqqqrrrrsssstttt");
  std::string holder = first.pod->name();
  PodId id = first.pod->id();
  first = Decision{};
  services_->index().removePod(id);
  Decision next = route("qqqqrrrrsssstttt", true);
  for (const auto& c : next.candidates)
    if (c.pod->name() == holder) {
      EXPECT_EQ(c.match_percent, 0);
    }
}

// Standalone mode (blend weight 0) labels its outcomes like AIBrix.
TEST_F(PrefixCacheTest, StandaloneModeOutcomes) {
  config_.routing.prefix_cache.scorer = "blend";
  config_.routing.blend.load_balance_weight = 0;
  build();
  EXPECT_EQ(route("mmmmnnnnoooopppp").outcome, "least_request_fallback");
  EXPECT_EQ(route("mmmmnnnnoooopppp").outcome, "prefix_match");
}

// Every decision is counted in the aibrix_prefix_cache_* series with AIBrix's labels.
TEST_F(PrefixCacheTest, RecordsAIBrixSeries) {
  route("kkkkllll");
  route("kkkkllll");
  std::map<std::string, double> counts;
  for (const auto& family : registry_.Collect())
    for (const auto& m : family.metric) {
      std::string key = family.name;
      for (const auto& l : m.label) key += "|" + l.name + "=" + l.value;
      counts[key] = family.type == prometheus::MetricType::Counter ? m.counter.value
                    : family.type == prometheus::MetricType::Gauge ? m.gauge.value
                                                                   : double(m.histogram.sample_count);
    }
  EXPECT_EQ(counts["aibrix_prefix_cache_routing_decisions_total|match_percent_bucket=0|model=m"], 1);
  EXPECT_EQ(counts["aibrix_prefix_cache_routing_decisions_total|match_percent_bucket=76-100|model=m"], 1);
  EXPECT_EQ(counts["aibrix_prefix_cache_routing_selection_total|model=m|selection=prefix_match"], 1);
  EXPECT_EQ(counts["aibrix_prefix_cache_routing_selection_total|model=m|selection=least_request_fallback"], 1);
  EXPECT_EQ(counts["aibrix_prefix_cache_routing_latency_seconds|model=m"], 2);
  EXPECT_EQ(counts["aibrix_prefix_cache_indexer_status|indexer_type=local|model=m"], 1);
}

}  // namespace
}  // namespace prefixgate::routing

namespace prefixgate::routing {
namespace {

// The other prefix strategies through the same Router, index and tokenizer.
class PrefixRulesTest : public PrefixCacheTest {
 protected:
  void use(const std::string& strategy, const std::string& settings = "") {
    config_.routing.strategy = strategy;
    if (!settings.empty()) config_.routing.strategy_settings[strategy] = settings;
    build();
  }
  discovery::PodPtr pod(const std::string& name) { return pods_->snapshot()->find(name); }
};

// Ensures prefill-cost follows the pod holding the prefix while that saves more prefill than the context it already
// serves costs, and leaves it once the context in flight there outweighs the blocks saved.
TEST_F(PrefixRulesTest, PrefillCostWeighsSavedBlocksAgainstContextInFlight) {
  use("prefill-cost");
  // 8 blocks of 4 characters; at the default 4 bytes per engine token, one engine token per block.
  const std::string prompt = "aaaabbbbccccddddeeeeffffgggghhhh";
  Decision first = route(prompt);
  const std::string holder = first.pod->name();
  first = Decision{};
  Decision warm = route(prompt + "zzzz");
  EXPECT_EQ(warm.pod->name(), holder);
  EXPECT_EQ(warm.match_percent, 88);  // 8 of 9 full blocks
  // Context in flight on the holder: 200 engine tokens (200 blocks), more than the 16 x 8 it would save.
  warm = Decision{};
  InFlightGuard busy(pod(holder), 200);
  Decision moved = route(prompt + "zzzz");
  EXPECT_NE(moved.pod->name(), holder);
  for (const Candidate& c : moved.candidates)
    if (c.pod->name() == holder) {
      EXPECT_DOUBLE_EQ(c.load_score, 200.0);  // 0 blocks to compute (the warm request recorded all 9) + 200 / 1
    }
}

// Ensures the blend's prefill term (routing.blend.prefill_cost_weight) changes prefix-cache's choice: with a
// large weight the cheapest pod by prefill cost wins over the blend's load term.
TEST_F(PrefixRulesTest, BlendPrefillTermCountsContextInFlight) {
  config_.routing.prefix_cache.scorer = "blend";
  build();
  config_.routing.blend.prefix_cache_weight = 0.01;  // the prefix term alone would not hold the pod
  const std::string prompt = "mmmmnnnnoooopppp";
  Decision first = route(prompt);
  const std::string holder = first.pod->name();
  first = Decision{};
  // The holder has 2 requests in flight with little context; another pod 1 request with a lot.
  InFlightGuard h1(pod(holder), 1), h2(pod(holder), 1);
  const std::string other = holder == "a" ? "b" : "a";
  const std::string third = holder == "c" ? "b" : "c";
  InFlightGuard o1(pod(other), 400), o2(pod(third), 400), o3(pod(third), 1);
  EXPECT_EQ(route(prompt, true).pod->name(), other);  // the load term decides: the fewest in flight
  config_.routing.blend.prefill_cost_weight = 100;  // read per decision
  EXPECT_EQ(route(prompt, true).pod->name(), holder);  // no blocks to compute, least context in flight
}

// Ensures prefix-cache-preble exploits a mostly cached prompt (the holder, though it has the most window load),
// explores a mostly new one (lowest load + missed prefill), and rebalances once loads are skewed past the ratio
// (with no minimum gap, so that a few tokens of load are skewed enough).
TEST_F(PrefixRulesTest, PrebleExploitsExploresAndRebalances) {
  use("prefix-cache-preble", "{decode_token_cost: 0, rebalance_min_gap_requests: 0}");
  // Three new 16-character prompts (4 engine tokens at 4 bytes per token): the first explores (all loads 0), then
  // each rebalances onto a pod with load 0.
  std::map<std::string, std::string> holder_of;
  for (const std::string prompt : {"aaaabbbbccccdddd", "eeeeffffgggghhhh", "iiiijjjjkkkkllll"}) {
    Decision d = route(prompt);
    holder_of[prompt] = d.pod->name();
  }
  EXPECT_EQ(std::set<std::string>({holder_of["aaaabbbbccccdddd"], holder_of["eeeeffffgggghhhh"],
                                   holder_of["iiiijjjjkkkkllll"]}).size(), 3u);  // loads 4 / 4 / 4
  // 4 of 5 tokens cached: exploit on the holder.
  Decision d = route("aaaabbbbccccddddXXXX");
  EXPECT_EQ(d.outcome, "exploit");
  EXPECT_EQ(d.pod->name(), holder_of["aaaabbbbccccdddd"]);  // now its load is 5
  d = Decision{};
  // Nothing cached anywhere: explore: the lowest load + 4 missed tokens, not the holder (5 + 4).
  d = route("QQQQRRRRSSSSTTTT");
  EXPECT_EQ(d.outcome, "explore");
  EXPECT_NE(d.pod->name(), holder_of["aaaabbbbccccdddd"]);
  d = Decision{};
  // Fully cached, but after that explore one pod has load 8 against 5 and 4 (> 1.5 x 4): rebalance onto the
  // least loaded though another holds the prompt.
  d = route("QQQQRRRRSSSSTTTT");
  EXPECT_EQ(d.outcome, "rebalance");
  for (const Candidate& c : d.candidates)
    if (c.pod == d.pod.get()) {
      EXPECT_DOUBLE_EQ(c.load_score, 4.0);
    }
}

// Ensures prefix-cache-preble keeps sequential requests sharing a long system prompt on the pod holding it on an
// idle fleet (issue 24: every window load above zero was more than 1.5 x an idle pod's, so they went round the
// pods at 0 % match), and still rebalances once the holder's window load is rebalance_min_gap_requests (8)
// requests like the next one above the idle pods'.
TEST_F(PrefixRulesTest, PrebleStaysWithTheSharedPrefixOnAnIdleFleetUntilTheGapIsReal) {
  use("prefix-cache-preble");  // the defaults: ratio 1.5, gap 8 requests, decode cost 10, 256 output tokens
  std::string system;
  // 2,000 characters: 500 engine tokens (at the default 4 bytes per token) and 500 blocks of the index's 1,000.
  while (system.size() < 2000) system += "You are a careful assistant for the billing team. ";
  const std::string holder = route(system + "question 0").pod->name();
  for (int i = 1; i < 6; ++i) {
    Decision d = route(system + "question " + std::to_string(i));
    EXPECT_EQ(d.pod->name(), holder) << i;
    EXPECT_EQ(d.outcome, "exploit") << i;
    EXPECT_GE(d.match_percent, 90) << i;
  }
  // Each follow-up adds its decode (2,560) to the holder's window load: past 8 x (503 + 2,560) above the idle
  // pods' (the tenth request's load), the next one goes to an idle pod.
  int follow_ups = 6;
  Decision moved;
  while (follow_ups < 40) {
    moved = route(system + "question " + std::to_string(follow_ups++));
    if (moved.pod->name() != holder) break;
  }
  EXPECT_EQ(moved.outcome, "rebalance");
  EXPECT_NE(moved.pod->name(), holder);
  EXPECT_GE(follow_ups, 9);   // not before the gap: 8 requests' work
  EXPECT_LE(follow_ups, 14);  // nor long after it
}

// Ensures prefix-cache-wait through the Router: a request's predicted uncached tokens are queued on its pod until
// its first byte (Decision::prefill) and noted for learning (Decision::sent); a follow-up goes back to the pod
// holding its prefix, until that pod's queue costs more than prefilling it elsewhere.
TEST_F(PrefixRulesTest, WaitFollowsTheCacheUntilItsQueueCostsMore) {
  use("prefix-cache-wait");
  // 32 characters, 8 blocks: 8 engine tokens at the default 4 bytes per token.
  const std::string prompt = "aaaabbbbccccddddeeeeffffgggghhhh";
  Decision first = route(prompt);
  const std::string holder = first.pod->name();
  EXPECT_EQ(first.strategy, "prefix-cache-wait");
  EXPECT_EQ(pod(holder)->signals().prefillTokens(), 8);  // nothing cached anywhere: the whole prompt to prefill
  EXPECT_DOUBLE_EQ(first.ticket.facts().sent.own_tokens, 8);
  EXPECT_DOUBLE_EQ(first.ticket.facts().sent.prefill_ahead_tokens, 0);
  first.ticket.firstByte();
  EXPECT_EQ(pod(holder)->signals().prefillTokens(), 0);
  first = Decision{};

  Decision warm = route(prompt + "zzzz");
  EXPECT_EQ(warm.pod->name(), holder);
  EXPECT_EQ(warm.match_percent, 88);  // 8 of 9 blocks
  EXPECT_DOUBLE_EQ(warm.ticket.facts().sent.own_tokens, 1);  // only the new block to compute
  warm = Decision{};
  Decision explained = route(prompt + "zzzz", true);  // a dry run explains its scores
  ASSERT_EQ(explained.explanations.size(), explained.candidates.size());
  for (size_t i = 0; i < explained.candidates.size(); ++i)
    if (explained.candidates[i].pod->name() != holder) {
      EXPECT_GT(explained.explanations[i].get("prefill_ms") / 1000, 0);
      EXPECT_DOUBLE_EQ(explained.explanations[i].get("queue_ms") / 1000, 0);
    }

  // Another client's uncached tokens queued on the holder: 15 cost less than what a move costs (the 8 tokens the
  // holder saves, and the fleet's 8 extra: fleet_work_weight 1), 18 cost more.
  {
    PrefillGuard queued(pod(holder), 15);
    EXPECT_EQ(route(prompt + "yyyy", true).pod->name(), holder);
  }
  PrefillGuard queued(pod(holder), 18);
  Decision moved = route(prompt + "xxxx", true);
  EXPECT_NE(moved.pod->name(), holder);
  for (size_t i = 0; i < moved.candidates.size(); ++i)
    if (moved.candidates[i].pod->name() == holder) {
      EXPECT_DOUBLE_EQ(moved.candidates[i].prefill_tokens, 18);
      EXPECT_GT(moved.explanations[i].get("queue_ms") / 1000, 0);
    }
}

// Ensures routing.prefix_cache.scorer picks prefix-cache's scorer: "wait" fills every candidate's wait, "blend"
// none; prefix-cache-wait and prefix-cache-blend are each scorer whatever the setting.
TEST_F(PrefixRulesTest, ScorerSettingChoosesPrefixCachesRule) {
  auto waits = [&](const std::string& header) {
    openai::RequestView r;
    r.model = "m";
    r.prompt_text = "some prompt text here";
    RouteQuery q{r, header, "", {}, true};
    Decision d = router_->choose(q, rng_);
    int filled = 0;
    for (const Explanation& e : d.explanations) filled += !std::isnan(e.get("total_ms"));
    return filled;
  };
  config_.routing.prefix_cache.scorer = "blend";
  build();
  EXPECT_EQ(waits(""), 0);
  EXPECT_EQ(waits("prefix-cache-wait"), 3);
  config_.routing.prefix_cache.scorer = "wait";
  build();
  EXPECT_EQ(waits(""), 3);
  EXPECT_EQ(waits("prefix-cache-blend"), 0);
}

// Ensures prefix-cache-wait balances new work over the window: twelve new prompts, each answered before the next
// (nothing in flight, no queue: every wait equal), go four to each pod; with the balance off (rebalance_ratio 0)
// the same seeded ties land unevenly.
TEST_F(PrefixRulesTest, WaitBalancesNewWorkOverTheWindow) {
  auto spread = [&](const std::string& settings) {
    use("prefix-cache-wait", settings);
    rng_.seed(7);
    std::map<std::string, int> count;
    for (int i = 0; i < 12; ++i) ++count[route("new prompt number " + std::to_string(i) + " about other things").pod->name()];
    return count;
  };
  EXPECT_EQ(spread(""), (std::map<std::string, int>{{"a", 4}, {"b", 4}, {"c", 4}}));
  EXPECT_NE(spread("{rebalance_ratio: 0}"), (std::map<std::string, int>{{"a", 4}, {"b", 4}, {"c", 4}}));
}

}  // namespace
}  // namespace prefixgate::routing
