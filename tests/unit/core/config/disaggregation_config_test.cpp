// The disaggregation section (disaggregated prefill/decode) and Kubernetes' role_label: parsed, defaulted and checked
// with problems naming the file and the key.
#include <gtest/gtest.h>

#include <algorithm>

#include "config/config.h"
#include "routing/strategy_registry.h"
#include "unit/problems.h"

namespace prefixgate::config {
namespace {

const std::vector<std::string> kStrategies = {"least-request", "prefix-cache", "random"};

using testing::hasProblem;

// Ensures the defaults are the contract's (connector, least-request, 0, client params removed) and that a file's values are read.
TEST(DisaggregationConfig, DefaultsAndValuesAreRead) {
  Problems problems;
  Config d = parseYaml("discovery: {file: pods.yaml}\n", "gw.yaml", problems);
  EXPECT_EQ(d.disaggregation.mode, DisaggregationConfig::Mode::kConnector);
  EXPECT_EQ(d.disaggregation.decode_strategy, "least-request");
  EXPECT_EQ(d.disaggregation.aggregate_below_tokens, 0u);
  EXPECT_FALSE(d.disaggregation.pass_client_kv_transfer_params);
  Config c = parseYaml(
      "discovery: {file: pods.yaml}\n"
      "disaggregation: {mode: sidecar, decode_strategy: random, aggregate_below_tokens: 256,\n"
      "                 pass_client_kv_transfer_params: true}\n",
      "gw.yaml", problems);
  EXPECT_EQ(c.disaggregation.mode, DisaggregationConfig::Mode::kSidecar);
  EXPECT_EQ(c.disaggregation.decode_strategy, "random");
  EXPECT_EQ(c.disaggregation.aggregate_below_tokens, 256u);
  EXPECT_TRUE(c.disaggregation.pass_client_kv_transfer_params);
  validate(c, kStrategies, problems);
  validateDecodeStrategy(c, kStrategies, {"prefix-cache"}, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  c = parseYaml("discovery: {file: pods.yaml}\ndisaggregation: {mode: connector}\n", "gw.yaml", problems);
  EXPECT_EQ(c.disaggregation.mode, DisaggregationConfig::Mode::kConnector);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

// Ensures a bad mode, a negative or non-numeric aggregate_below_tokens, an unknown or empty decode strategy and an
// unknown key are each a problem naming the file and the dotted key.
TEST(DisaggregationConfig, BadValuesNameTheFileAndKey) {
  Problems problems;
  parseYaml("disaggregation: {mode: proxy, aggregate_below_tokens: -1, colour: red}\n", "/etc/gw.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "/etc/gw.yaml: disaggregation.mode: expected connector or sidecar, got 'proxy'"));
  EXPECT_TRUE(hasProblem(problems, "/etc/gw.yaml: disaggregation.aggregate_below_tokens: expected a whole number"));
  EXPECT_TRUE(hasProblem(problems, "/etc/gw.yaml: disaggregation.colour: unknown key"));
  EXPECT_EQ(problems.size(), 3u);

  Problems checked;
  Config c = parseYaml("discovery: {file: pods.yaml}\ndisaggregation: {decode_strategy: fastest}\n", "/etc/gw.yaml",
                       checked);
  validateDecodeStrategy(c, kStrategies, {}, checked);
  ASSERT_EQ(checked.size(), 1u);
  EXPECT_EQ(checked[0], "/etc/gw.yaml: disaggregation.decode_strategy: unknown strategy 'fastest' (valid: "
                        "least-request, prefix-cache, random)");
  c.disaggregation.decode_strategy = "";
  checked.clear();
  validateDecodeStrategy(c, kStrategies, {}, checked);
  ASSERT_EQ(checked.size(), 1u);
  EXPECT_EQ(checked[0], "/etc/gw.yaml: disaggregation.decode_strategy: must not be empty");
}

// Ensures a decode strategy that scores by the prompt's match is refused, naming it, and a load strategy is not.
TEST(DisaggregationConfig, DecodeStrategyMustNotMatchPrompts) {
  Problems problems;
  Config c = parseYaml("discovery: {file: pods.yaml}\ndisaggregation: {decode_strategy: prefix-cache}\n", "gw.yaml",
                       problems);
  validateDecodeStrategy(c, kStrategies, {"prefix-cache", "prefill-cost"}, problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: disaggregation.decode_strategy: 'prefix-cache' scores by the prompt's "
                                   "prefix match"));
  problems.clear();
  c.disaggregation.decode_strategy = "least-request";
  validateDecodeStrategy(c, kStrategies, {"prefix-cache", "prefill-cost"}, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

// Ensures routing.load_only_strategy (rerank and score) is checked as the decode strategy is: a known strategy that
// does not match prompts, least-request by default.
TEST(DisaggregationConfig, LoadOnlyStrategyMustNotMatchPrompts) {
  Problems problems;
  Config c = parseYaml("discovery: {file: pods.yaml}\nrouting: {load_only_strategy: prefix-cache}\n", "gw.yaml",
                       problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  validateDecodeStrategy(c, kStrategies, {"prefix-cache"}, problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.load_only_strategy: 'prefix-cache' scores by the prompt's prefix "
                                   "match, which rerank and score requests have none of"));
  problems.clear();
  c.routing.load_only_strategy = "fastest";
  validateDecodeStrategy(c, kStrategies, {"prefix-cache"}, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.load_only_strategy: unknown strategy 'fastest'"));
  EXPECT_EQ(Config{}.routing.load_only_strategy, "least-request");
}

// Ensures what main's check of the decode strategy rests on: with no prefix services (a bare StrategyDeps) every
// prompt-matching strategy is either not built or says it wants the match, and the default decode strategy is
// built and does not.
TEST(DisaggregationConfig, RegistryTellsPromptMatchingStrategiesApart) {
  const Config config;
  const routing::StrategyRegistry registry = routing::StrategyRegistry::builtin();
  const auto built = registry.createAll(routing::StrategyDeps{config});
  auto matchesPrompts = [&built](const std::string& name) {
    auto it = built.find(name);
    return it == built.end() || it->second->wantsPromptMatch();
  };
  for (const char* prefix : {"prefix-cache", "prefix-cache-wait", "prefix-cache-blend", "prefix-cache-preble",
                             "prefill-cost"})
    EXPECT_TRUE(matchesPrompts(prefix)) << prefix;
  for (const char* load : {"least-request", "random", "power-of-two", "load-balance"})
    EXPECT_FALSE(matchesPrompts(load)) << load;
  EXPECT_FALSE(matchesPrompts(config.disaggregation.decode_strategy));
}

// Ensures discovery.kubernetes.role_label defaults to llm-d's label and may be set (AIBrix's) or emptied.
TEST(DisaggregationConfig, KubernetesRoleLabel) {
  Problems problems;
  Config d = parseYaml("discovery: {kubernetes: {}}\n", "gw.yaml", problems);
  ASSERT_TRUE(d.discovery.kubernetes.has_value());
  EXPECT_EQ(d.discovery.kubernetes->role_label, "llm-d.ai/role");
  Config a = parseYaml("discovery: {kubernetes: {role_label: role-name}}\n", "gw.yaml", problems);
  EXPECT_EQ(a.discovery.kubernetes->role_label, "role-name");
  Config e = parseYaml("discovery: {kubernetes: {role_label: \"\"}}\n", "gw.yaml", problems);
  EXPECT_EQ(e.discovery.kubernetes->role_label, "");
  EXPECT_TRUE(problems.empty()) << problems.front();
}

}  // namespace
}  // namespace prefixgate::config
