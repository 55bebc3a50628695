// The strategy seam: every strategy file registered by its one PREFIXGATE_STRATEGY line, strategy settings read and
// checked under routing.strategies.<name>, the Router's pick as a pure function, and the strategies that came
// with it (power-of-two, least-latency) on hand-made pod states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "config/config.h"
#include "openai/request.h"
#include "routing/load_score.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"
#include "unit/core/pod_specs.h"
#include "unit/problems.h"

namespace prefixgate::routing {
namespace {

std::vector<Candidate> withInFlight(std::vector<int32_t> in_flight) {
  std::vector<Candidate> out;
  for (size_t i = 0; i < in_flight.size(); ++i) out.push_back(Candidate{nullptr, PodId{uint32_t(i + 1)}, in_flight[i]});
  return out;
}

using testing::hasProblem;

// Ensures every strategy file's one registration line reaches the built-in registry (the build collects them).
TEST(StrategyRegistry, BuiltinHasEveryStrategyFile) {
  const std::vector<std::string> names = StrategyRegistry::builtin().names();
  for (const char* name : {"random", "least-request", "prefix-cache", "load-balance", "least-kv-cache", "throughput",
                           "power-of-two", "least-latency", "session-affinity", "prefill-cost", "prefix-cache-preble",
                           "prefix-cache-wait", "prefix-cache-blend"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
}

// Ensures strategy settings are read from routing.strategies.<name>, and that a bad value, an unknown key, a name
// no strategy has and settings for a strategy without any are refused naming the file, the key and why.
TEST(StrategyRegistry, SettingsAreCheckedNamingFileKeyAndReason) {
  config::Problems problems;
  config::Config c = config::parseYaml(
      "discovery: {file: p.yaml}\nrouting:\n  strategies:\n    least-latency: {decay_half_life_ms: 0, typo: 1}\n"
      "    fastest: {x: 1}\n    random: {seed: 3}\n",
      "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  StrategyRegistry::builtin().checkSettings(c, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.least-latency.decay_half_life_ms: must be greater than 0"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.least-latency.typo: unknown key"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.fastest: no strategy of that name has settings"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.random: this strategy has no settings"));
  EXPECT_EQ(problems.size(), 4u);
  config::Problems none;
  config::Config ok = config::parseYaml(
      "discovery: {file: p.yaml}\nrouting: {strategies: {least-latency: {decay_half_life_ms: 500}}}\n", "gw.yaml", none);
  StrategyRegistry::builtin().checkSettings(ok, none);
  EXPECT_TRUE(none.empty()) << none.front();
}

// Ensures the cost rules' settings are range-checked with the key and the reason.
TEST(StrategyRegistry, CostRuleSettingsAreChecked) {
  config::Problems problems;
  config::Config c = config::parseYaml(
      "discovery: {file: p.yaml}\nrouting:\n  strategies:\n    prefill-cost: {prefill_weight: -1}\n"
      "    prefix-cache-preble: {window_ms: 10, rebalance_ratio: 0.5, decode_token_cost: -2}\n"
      "    prefix-cache-wait: {min_samples: 2000000, speed_tolerance: -1, window_ms: 5, rebalance_ratio: 0.5, fleet_work_weight: -1}\n",
      "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  StrategyRegistry::builtin().checkSettings(c, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefill-cost.prefill_weight: must be between 0 and 1000"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-preble.window_ms: must be at least 60"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-preble.rebalance_ratio: must be at least 1"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-preble.decode_token_cost: must be between"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-wait.min_samples: must be at most 1000000"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-wait.speed_tolerance: must be between 0 and 100"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-wait.window_ms: must be at least 60"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-wait.rebalance_ratio: must be 0 (off) or at least 1"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategies.prefix-cache-wait.fleet_work_weight: must be between 0 and 100"));
  EXPECT_EQ(problems.size(), 9u);
}

// Ensures the pick is the highest score, then the fewest in flight, and among full ties each equally likely.
TEST(PickBest, ScoreThenInFlightThenUniform) {
  std::mt19937_64 rng(3);
  auto c = withInFlight({5, 1, 0});
  c[0].score = 2;
  c[1].score = 2;
  c[2].score = 1;
  EXPECT_EQ(pickBest(c, rng), 1u);  // equal best scores: fewer in flight
  auto tie = withInFlight({2, 2, 2, 2});
  std::map<size_t, int> seen;
  for (int i = 0; i < 4000; ++i) ++seen[pickBest(tie, rng)];
  ASSERT_EQ(seen.size(), 4u);
  for (const auto& [index, n] : seen) EXPECT_NEAR(n, 1000, 150) << index;
}

struct Runner {
  config::Config config;
  std::map<std::string, std::unique_ptr<Strategy>, std::less<>> strategies;
  openai::RequestView request;
  std::mt19937_64 rng{11};
  explicit Runner(config::Config c = {}) : config(std::move(c)) {
    strategies = StrategyRegistry::builtin().createAll(StrategyDeps{config});
  }
  size_t choose(std::string_view name, std::vector<Candidate>& c, bool dry_run = true) {
    RoutingInput input{request, c, RequestSettings{}, rng, dry_run};
    Strategy& strategy = *strategies.find(name)->second;
    strategy.score(input);
    const size_t chosen = pickBest(c, rng);
    strategy.onPicked(input, chosen);
    outcome = input.outcome;
    return chosen;
  }
  std::string_view outcome;
};

// Ensures power-of-two compares two distinct random candidates: the busiest of three distinct loads is never
// chosen, the middle one only when drawn with the busiest (a third of the pairs), the idlest otherwise.
TEST(PowerOfTwoStrategy, FewerInFlightOfTwoRandomCandidates) {
  Runner runner;
  std::map<size_t, int> seen;
  for (int i = 0; i < 3000; ++i) {
    auto c = withInFlight({9, 5, 0});
    ++seen[runner.choose("power-of-two", c)];
  }
  EXPECT_EQ(seen[0], 0);
  EXPECT_NEAR(seen[1], 1000, 120);
  EXPECT_NEAR(seen[2], 2000, 120);
  auto one = withInFlight({4});
  EXPECT_EQ(runner.choose("power-of-two", one), 0u);
}

// Ensures the latency estimate halves per half-life since the pod's last answer and is 0 before any.
TEST(LeastLatency, EstimateFadesWithIdleTime) {
  LatencyEstimate::Sample s{0.8, 1000, 3};
  EXPECT_DOUBLE_EQ(estimatedSeconds(s, 1000, 500), 0.8);
  EXPECT_DOUBLE_EQ(estimatedSeconds(s, 1500, 500), 0.4);
  EXPECT_DOUBLE_EQ(estimatedSeconds(s, 2000, 500), 0.2);
  EXPECT_DOUBLE_EQ(estimatedSeconds(LatencyEstimate::Sample{}, 5000, 500), 0.0);
  LatencyEstimate e;
  e.add(1.0, 10);
  e.add(2.0, 20);
  EXPECT_DOUBLE_EQ(e.read().seconds, 1.0 + LatencyEstimate::kWeight * (2.0 - 1.0));
  EXPECT_EQ(e.read().samples, 2u);
}

// Ensures least-latency prefers the pod with the lowest measured time to first byte, tries a never-measured pod
// first, and (with its configured half-life) comes back to a slow pod once its estimate has faded below the others.
TEST(LeastLatencyStrategy, LowestRecentTimeToFirstByte) {
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2), testing::podSpec("c", 3)});
  const auto snapshot = pods.snapshot();
  std::vector<discovery::PodState*> p;
  for (const auto& pod : snapshot->pods()) p.push_back(pod.get());
  auto candidatesNow = [&] {
    std::vector<Candidate> c;
    for (discovery::PodState* pod : p) c.push_back(Candidate{pod, pod->id(), 0});
    return c;
  };
  config::Problems problems;
  Runner runner(config::parseYaml(
      "discovery: {file: p.yaml}\nrouting: {strategies: {least-latency: {decay_half_life_ms: 60000}}}\n", "gw.yaml",
      problems));
  const int64_t now = steadyNowMs();
  p[0]->signals().latency().add(0.9, now);
  p[1]->signals().latency().add(0.2, now);
  auto c = candidatesNow();
  EXPECT_EQ(runner.choose("least-latency", c), 2u);  // c never measured: tried first
  p[2]->signals().latency().add(0.5, now);
  c = candidatesNow();
  EXPECT_EQ(runner.choose("least-latency", c), 1u);
  EXPECT_NEAR(c[0].load_score, 0.9, 0.001);  // its estimate, shown by /debug/route (a few ms of fading at most)
  // A long idle time fades a's estimate; with a short half-life it would already be tried again.
  LatencyEstimate::Sample old{0.9, now - 600000, 1};
  EXPECT_LT(estimatedSeconds(old, now, 60000), 0.2);
}

// Ensures session-affinity keeps a session on its pod while that pod is a candidate (even when busier), moves it to
// the least loaded candidate when the pod is filtered out and remembers the move, routes requests without a session
// by least-request, records nothing in dry runs, and bounds its table (least recently used sessions forgotten).
TEST(SessionAffinityStrategy, PinsWhileTheCandidateStaysAndMovesOtherwise) {
  config::Problems problems;
  Runner runner(config::parseYaml(
      "discovery: {file: p.yaml}\nrouting: {strategies: {session-affinity: {max_sessions: 2}}}\n", "gw.yaml", problems));
  ASSERT_TRUE(problems.empty());
  runner.request.session_id = "conversation-1";
  auto c = withInFlight({3, 0, 1});
  EXPECT_EQ(runner.choose("session-affinity", c, false), 1u);  // new: fewest in flight
  EXPECT_EQ(runner.outcome, "new");
  c = withInFlight({0, 7, 1});
  EXPECT_EQ(runner.choose("session-affinity", c, false), 1u);  // pinned, though now the busiest
  EXPECT_EQ(runner.outcome, "pinned");
  auto without_pod_2 = withInFlight({0, 1});  // pod 2 filtered out (ejected, full, gated): ids 1 and 2 only...
  without_pod_2[1].pod_id = PodId{3};         // ...pods 1 and 3
  EXPECT_EQ(runner.choose("session-affinity", without_pod_2, false), 0u);
  EXPECT_EQ(runner.outcome, "moved");
  c = withInFlight({5, 0, 0});
  EXPECT_EQ(runner.choose("session-affinity", c, false), 0u);  // the move was remembered: pod 1 now
  // Dry runs record nothing.
  runner.request.session_id = "dry";
  c = withInFlight({4, 0, 4});
  runner.choose("session-affinity", c, true);
  c = withInFlight({0, 4, 4});
  runner.choose("session-affinity", c, true);
  EXPECT_EQ(runner.outcome, "new");
  // No session: least-request.
  runner.request.session_id = "";
  c = withInFlight({2, 1, 3});
  EXPECT_EQ(runner.choose("session-affinity", c, false), 1u);
  EXPECT_EQ(runner.outcome, "no_session");
  // max_sessions 2: with "b" and "c" added, conversation-1 (the least recently used) is forgotten.
  for (const char* id : {"b", "c"}) {
    runner.request.session_id = id;
    c = withInFlight({0, 1, 1});
    runner.choose("session-affinity", c, false);
  }
  runner.request.session_id = "conversation-1";
  c = withInFlight({1, 1, 0});
  runner.choose("session-affinity", c, true);
  EXPECT_EQ(runner.outcome, "new");
}

}  // namespace
}  // namespace prefixgate::routing
