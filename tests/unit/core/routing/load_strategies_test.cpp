// The capacity-aware load score as the strategies use it, the Router's KV-critical filter, per-model knobs, and
// the load-balance, least-kv-cache and throughput strategies.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "openai/request.h"
#include "routing/load_guards.h"
#include "routing/load_score.h"
#include "routing/prefix/selection.h"
#include "routing/router.h"
#include "unit/core/pod_specs.h"
#include "unit/problems.h"

namespace prefixgate::routing {
namespace {

struct Pod {
  int32_t in_flight = 0;
  double waiting = 0;
  double kv_usage = NAN;
  double capacity = 0;
};

std::vector<Candidate> candidates(const std::vector<Pod>& pods) {
  std::vector<Candidate> out;
  for (size_t i = 0; i < pods.size(); ++i) {
    Candidate c{nullptr, PodId{static_cast<uint32_t>(i + 1)}, pods[i].in_flight};
    c.waiting = pods[i].waiting;
    c.kv_usage = pods[i].kv_usage;
    c.capacity = pods[i].capacity;
    out.push_back(c);
  }
  return out;
}

// The Router's pick without the random tie-break: highest score, then fewer in flight, then the first.
size_t pick(const std::vector<Candidate>& c) {
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i)
    if (c[i].score > c[best].score || (c[i].score == c[best].score && c[i].in_flight < c[best].in_flight)) best = i;
  return best;
}

class StrategyRunner {
 public:
  explicit StrategyRunner(config::Config config = {}) : config_(std::move(config)) {
    strategies_ = StrategyRegistry::builtin().createAll(StrategyDeps{config_});
  }
  // Scores `c` with the named strategy and returns the pick.
  size_t run(std::string_view name, std::vector<Candidate>& c, config::LoadBalanceConfig lb = {}) {
    RequestSettings settings;
    settings.load_balance = lb;
    RoutingInput input{request_, c, settings, rng_, true};
    strategies_.find(name)->second->score(input);
    return pick(c);
  }

 private:
  config::Config config_;
  std::map<std::string, std::unique_ptr<Strategy>, std::less<>> strategies_;
  openai::RequestView request_;
  std::mt19937_64 rng_{7};
};

// The score of each candidate: (in_flight + lambda * waiting) / capacity * (1 + alpha * kv_used^2).
TEST(CapacityLoadScores, FormulaOnCandidates) {
  auto c = candidates({{4, 2, 0.5, 200}, {4, 0, NAN, 100}});
  capacityLoadScores(c, config::LoadBalanceConfig{0.5, 2.0, 0.1});
  EXPECT_DOUBLE_EQ(c[0].load_score, (4 + 0.5 * 2) / 200.0 * (1 + 2.0 * 0.25));
  EXPECT_DOUBLE_EQ(c[1].load_score, 4 / 100.0);  // unknown KV usage: no pressure
}

// Pods without a measured capacity count as the mean of those with one; with none measured, as 1.
TEST(CapacityLoadScores, MeanOfOthersCapacity) {
  auto c = candidates({{6, 0, NAN, 100}, {6, 0, NAN, 300}, {6, 0, NAN, 0}});
  EXPECT_DOUBLE_EQ(fallbackCapacity(c), 200);
  capacityLoadScores(c, {});
  EXPECT_DOUBLE_EQ(c[2].load_score, 6 / 200.0);
  auto none = candidates({{3}, {5}});
  EXPECT_DOUBLE_EQ(fallbackCapacity(none), 1);
  capacityLoadScores(none, {});
  EXPECT_DOUBLE_EQ(none[0].load_score, 3);  // the in-flight count, as before any traffic was measured
}

// KV usage is clamped to 0..1 before it is used (a glitching exporter cannot make a score negative).
TEST(CapacityLoadScores, KvUsageIsClamped) {
  auto c = candidates({{1, 0, -0.5}, {1, 0, 1.5}});
  EXPECT_DOUBLE_EQ(kvFree(c[0]), 1);
  EXPECT_DOUBLE_EQ(kvFree(c[1]), 0);
}

// Infinite scores (kv_free below kv_critical) leave the candidates unless every candidate has one.
TEST(ExcludeInfiniteLoad, UnlessEveryPodIsCritical) {
  auto c = candidates({{0, 0, 0.95}, {5, 0, 0.2}, {0, 0, 0.99}});
  capacityLoadScores(c, {});
  std::vector<Candidate> excluded;
  EXPECT_EQ(excludeInfiniteLoad(c, excluded), 2u);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].pod_id.value, 2u);
  ASSERT_EQ(excluded.size(), 2u);
  EXPECT_TRUE(excluded[0].excluded && excluded[1].excluded);

  auto all = candidates({{0, 0, 0.95}, {5, 0, 0.99}});
  capacityLoadScores(all, {});
  excluded.clear();
  EXPECT_EQ(excludeInfiniteLoad(all, excluded), 0u);
  EXPECT_EQ(all.size(), 2u);
  EXPECT_TRUE(excluded.empty());
}

// The blend uses the capacity-aware score: a pod twice as fast carries twice the requests at equal load score.
TEST(BlendWithEngineLoad, CapacityAndKvPressureCount) {
  auto c = candidates({{4, 0, NAN, 200}, {3, 0, NAN, 100}});
  std::vector<uint32_t> none{0, 0};
  blendScores(c, none, 4, 5, 4, config::LoadBalanceConfig{});
  EXPECT_EQ(pick(c), 0u);  // 4/200 < 3/100
  auto kv = candidates({{2, 0, 0.8}, {3, 0, 0.0}});
  blendScores(kv, none, 4, 5, 4, config::LoadBalanceConfig{});
  EXPECT_EQ(pick(kv), 1u);  // 2 * (1 + 2 * 0.64) = 4.56 > 3
  // Every pod critical: load does not decide, prefix (then in-flight) does.
  auto full = candidates({{0, 0, 0.99}, {3, 0, 0.99}});
  std::vector<uint32_t> second_holds{0, 4};
  blendScores(full, second_holds, 4, 5, 4, config::LoadBalanceConfig{});
  EXPECT_EQ(pick(full), 1u);
  EXPECT_FALSE(std::isnan(full[0].score));
}

// load-balance: the lowest capacity-aware score wins; the knobs come from the request's settings.
TEST(LoadBalanceStrategy, LowestScoreWins) {
  StrategyRunner runner;
  auto c = candidates({{2, 10, NAN, 100}, {3, 0, NAN, 100}, {5, 0, NAN, 400}});
  EXPECT_EQ(runner.run("load-balance", c), 2u);  // lambda 0: 2/100, 3/100, 5/400
  EXPECT_DOUBLE_EQ(c[2].load_score, 5 / 400.0);
  auto waiting = candidates({{2, 10, NAN, 100}, {3, 0, NAN, 100}});
  EXPECT_EQ(runner.run("load-balance", waiting, config::LoadBalanceConfig{1.0, 2.0, 0.1}), 1u);  // 12 vs 3
}

// load-balance when every pod is KV-critical: all scores are -inf, so fewer in flight wins.
TEST(LoadBalanceStrategy, AllCriticalFallsBackToInFlight) {
  StrategyRunner runner;
  auto c = candidates({{4, 0, 0.99}, {1, 0, 0.95}});
  EXPECT_EQ(runner.run("load-balance", c), 1u);
}

// least-kv-cache: the lowest KV usage wins; equal usage goes to fewer in flight; unknown counts as the mean.
TEST(LeastKvCacheStrategy, LowestUsageThenInFlight) {
  StrategyRunner runner;
  auto c = candidates({{0, 0, 0.7}, {9, 0, 0.2}, {1, 0, 0.5}});
  EXPECT_EQ(runner.run("least-kv-cache", c), 1u);
  auto tie = candidates({{3, 0, 0.2}, {1, 0, 0.2}});
  EXPECT_EQ(runner.run("least-kv-cache", tie), 1u);
  auto unknown = candidates({{0, 0, 0.6}, {0, 0, NAN}, {0, 0, 0.2}});
  runner.run("least-kv-cache", unknown);
  EXPECT_DOUBLE_EQ(unknown[1].score, -0.4);
  EXPECT_EQ(pick(unknown), 2u);
  auto none = candidates({{4}, {2}});
  EXPECT_EQ(runner.run("least-kv-cache", none), 1u);  // nothing known: least-request
}

// throughput: the highest capacity / (in_flight + 1); idle pods are told apart by speed.
TEST(ThroughputStrategy, LargestShareOfMeasuredRate) {
  StrategyRunner runner;
  auto idle = candidates({{0, 0, NAN, 100}, {0, 0, NAN, 300}, {0, 0, NAN, 0}});
  EXPECT_EQ(runner.run("throughput", idle), 1u);
  EXPECT_DOUBLE_EQ(idle[2].score, 200);  // unmeasured: the mean of the others
  auto busy = candidates({{2, 0, NAN, 300}, {0, 0, NAN, 200}});
  EXPECT_EQ(runner.run("throughput", busy), 1u);  // 100 < 200
}

// ---- through the Router: engine data from the pods, the KV-critical filter, per-model knobs ----

discovery::PodSpec spec(const std::string& name, uint16_t port) {
  return testing::podSpec(name, port, {"m", "n"});
}

class RouterLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.routing.strategy = "load-balance";
    config_.discovery.file = "p.yaml";
    pods_.update({spec("a", 1), spec("b", 2), spec("c", 3)});
    for (const auto& p : pods_.snapshot()->pods()) p->recordHealth(true, 1, 1);
  }
  void build() {
    router_ = std::make_unique<Router>(StrategyRegistry::builtin(), StrategyDeps{config_}, pods_,
                                       [this] { return now_ms_; });
  }
  void engine(const std::string& pod, double kv_usage, double waiting = 0, int64_t age_ms = 0) {
    engine::EngineSnapshot s;
    s.scraped_at_ms = now_ms_ - age_ms;
    s.kv_usage = kv_usage;
    s.has_kv_usage = true;
    s.waiting = waiting;
    s.has_waiting = true;
    pods_.snapshot()->find(pod)->engine().publish(s);
  }
  Decision choose(const std::string& model = "m", std::string_view header = "", std::string_view profile = "") {
    request_.model = model;
    RouteQuery q{request_, header, profile, {}, true};
    return router_->choose(q, rng_);
  }
  static const Candidate* find(const Decision& d, const std::string& name) {
    for (const Candidate& c : d.candidates)
      if (c.pod->name() == name) return &c;
    return nullptr;
  }
  config::Config config_;
  discovery::PodRegistry pods_;
  std::unique_ptr<Router> router_;
  openai::RequestView request_;
  std::mt19937_64 rng_{42};
  int64_t now_ms_ = 100'000;
};

// A pod whose KV cache is nearly full is never picked, by any strategy, and /debug/route lists it as excluded.
TEST_F(RouterLoadTest, KvCriticalPodIsExcludedForEveryStrategy) {
  build();
  engine("a", 0.95);
  engine("b", 0.95);
  for (const char* strategy : {"load-balance", "least-request", "random", "throughput", "least-kv-cache"}) {
    for (int i = 0; i < 20; ++i) {
      Decision d = choose("m", strategy);
      ASSERT_EQ(d.failure, RouteFailure::kNone);
      EXPECT_EQ(d.pod->name(), "c") << strategy;
      ASSERT_EQ(d.candidates.size(), 3u);
      EXPECT_TRUE(find(d, "a")->excluded);
      EXPECT_FALSE(find(d, "c")->excluded);
      EXPECT_TRUE(std::isinf(find(d, "a")->load_score));
    }
  }
}

// When every pod is KV-critical none is excluded: a full pod still beats a 503.
TEST_F(RouterLoadTest, AllCriticalKeepsEveryPod) {
  build();
  engine("a", 0.95);
  engine("b", 0.99);
  engine("c", 0.92);
  Decision d = choose();
  ASSERT_EQ(d.failure, RouteFailure::kNone);
  for (const Candidate& c : d.candidates) EXPECT_FALSE(c.excluded);
}

// Engine metrics older than the staleness limit count as unknown: the full pod is no longer excluded.
TEST_F(RouterLoadTest, StaleEngineMetricsAreNeutral) {
  build();
  const int64_t limit = engine::maxEngineMetricsAgeMs(config_.engine_metrics.scrape_interval_ms,
                                                      config_.engine_metrics.scrape_timeout_ms);
  engine("a", 0.99, 5, limit + 1);
  Decision d = choose();
  const Candidate* a = find(d, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(a->excluded);
  EXPECT_TRUE(std::isnan(a->kv_usage));
  EXPECT_DOUBLE_EQ(a->waiting, 0);
  engine("a", 0.99, 5, limit);  // just within the limit
  EXPECT_TRUE(find(choose(), "a")->excluded);
}

// routing.load_balance is overridden per model and per profile (kv_critical here), and only for that model.
TEST_F(RouterLoadTest, PerModelAndProfileKnobs) {
  config_.models["m"].load_balance.kv_critical = 0.5;
  config_.models["m"].profiles["lenient"].load_balance.kv_critical = 0.0;
  build();
  engine("a", 0.6);  // kv_free 0.4: critical for m (0.5), not for the default (0.10)
  EXPECT_TRUE(find(choose("m"), "a")->excluded);
  EXPECT_FALSE(find(choose("n"), "a")->excluded);
  EXPECT_FALSE(find(choose("m", "", "lenient"), "a")->excluded);
}

// The per-model lambda reaches the load-balance strategy: with it, engine-reported waiting requests count.
TEST_F(RouterLoadTest, PerModelLambdaWeighsWaiting) {
  config_.models["m"].load_balance.lambda = 1.0;
  build();
  engine("a", 0.1, 0);
  engine("b", 0.1, 50);
  engine("c", 0.1, 50);
  auto b = pods_.snapshot()->find("b");
  auto c = pods_.snapshot()->find("c");
  InFlightGuard hold_b(b), hold_c(c);  // a has more in flight than b and c
  auto a = pods_.snapshot()->find("a");
  InFlightGuard h1(a), h2(a), h3(a);
  EXPECT_EQ(choose("m").pod->name(), "a");  // 3 < 1 + 50
  EXPECT_NE(choose("n").pod->name(), "a");  // lambda 0: 3 > 1
}

// The Router reads measured capacity from the pods: unmeasured pods get the mean of the measured ones.
TEST_F(RouterLoadTest, CapacityFromRelayedTokens) {
  build();
  auto a = pods_.snapshot()->find("a");
  a->engine().addOutputTokens(100, 1000);
  a->engine().addOutputTokens(100, 2000);  // 200 tokens over 1 s
  Decision d = choose("m", "throughput");
  EXPECT_DOUBLE_EQ(find(d, "a")->capacity, 200);
  EXPECT_DOUBLE_EQ(find(d, "b")->capacity, 0);
  EXPECT_DOUBLE_EQ(find(d, "b")->score, 200);  // the mean of the others
}

// ---- configuration: routing_config.load_balance per model and profile ----

using testing::hasProblem;

// A model's and a profile's load_balance overrides are read; unset fields inherit the level above.
TEST(LoadBalanceConfig, PerModelAndProfileOverridesParse) {
  config::Problems problems;
  config::Config c = config::parseYaml(R"(
discovery: {file: p.yaml}
routing: {load_balance: {lambda: 0.25}}
models:
  m:
    routing_config: {load_balance: {kv_critical: 0.3, alpha: 1}}
    profiles:
      p: {routing_config: {load_balance: {lambda: 2}}}
)", "gw.yaml", problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  const config::ModelConfig& m = c.models.at("m");
  const config::LoadBalanceConfig model = m.load_balance.over(c.routing.load_balance);
  EXPECT_DOUBLE_EQ(model.lambda, 0.25);
  EXPECT_DOUBLE_EQ(model.alpha, 1);
  EXPECT_DOUBLE_EQ(model.kv_critical, 0.3);
  const config::LoadBalanceConfig profile = m.profiles.at("p").load_balance.over(model);
  EXPECT_DOUBLE_EQ(profile.lambda, 2);
  EXPECT_DOUBLE_EQ(profile.kv_critical, 0.3);
}

// Out-of-range or unknown override keys are start-up problems naming the dotted key.
TEST(LoadBalanceConfig, BadOverridesNameTheKey) {
  config::Problems problems;
  config::Config c = config::parseYaml(R"(
discovery: {file: p.yaml}
models:
  m:
    routing_config: {load_balance: {kv_critical: 1.5, beta: 1}}
    profiles:
      p: {routing_config: {load_balance: {alpha: -1}}}
)", "gw.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: models.m.routing_config.load_balance.beta: unknown key"));
  config::validate(c, StrategyRegistry::builtin().names(), problems);
  EXPECT_TRUE(hasProblem(problems, "models.m.routing_config.load_balance.kv_critical: must be in [0, 1)"));
  EXPECT_TRUE(hasProblem(problems, "models.m.profiles.p.routing_config.load_balance.alpha: must not be negative"));
}

}  // namespace
}  // namespace prefixgate::routing
