#include "routing/prediction_audit.h"

#include <gtest/gtest.h>

#include <cmath>

#include "discovery/pod_set.h"
#include "metrics/gateway_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/router.h"
#include "server/request_outcome.h"
#include "unit/core/pod_specs.h"

namespace prefixgate {
namespace {

using routing::PredictionAudit;

// predicted = round(fraction x engine prompt tokens); the error is (predicted - engine) / prompt tokens.
TEST(PredictionAudit, ComparesInEngineTokens) {
  auto a = PredictionAudit::compare(0.5, 101, 48);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->prompt_tokens, 101u);
  EXPECT_EQ(a->predicted_tokens, 51u);  // 50.5 rounds half away from zero
  EXPECT_EQ(a->engine_cached_tokens, 48u);
  EXPECT_DOUBLE_EQ(a->error_ratio, 3.0 / 101);
  auto under = PredictionAudit::compare(0.0, 200, 160);
  ASSERT_TRUE(under);
  EXPECT_EQ(under->predicted_tokens, 0u);
  EXPECT_DOUBLE_EQ(under->error_ratio, -0.8);
  auto over = PredictionAudit::compare(1.7, 64, 0);  // above 1 counts as 1
  ASSERT_TRUE(over);
  EXPECT_EQ(over->predicted_tokens, 64u);
  EXPECT_DOUBLE_EQ(over->error_ratio, 1.0);
  auto empty = PredictionAudit::compare(0.9, 0, 0);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->predicted_tokens, 0u);
  EXPECT_EQ(empty->error_ratio, 0);
}

// Nothing is audited without a prediction or without both of the engine's numbers.
TEST(PredictionAudit, NothingToCompare) {
  EXPECT_FALSE(PredictionAudit::compare(NAN, 100, 50));
  EXPECT_FALSE(PredictionAudit::compare(-1, 100, 50));
  EXPECT_FALSE(PredictionAudit::compare(0.5, std::nullopt, 50));
  EXPECT_FALSE(PredictionAudit::compare(0.5, 100, std::nullopt));
}

// Per-pod sums and accuracy = 1 - sum|p - e| / sum max(p, e): null before any audit, 1 when both sides are 0.
TEST(PredictionTotals, SumsAndAccuracy) {
  routing::PredictionTotals t;
  EXPECT_FALSE(t.sums().accuracy());
  t.add(0, 0);
  EXPECT_EQ(t.sums().accuracy(), 1.0);
  t.add(100, 80);
  t.add(0, 50);
  t.add(60, 60);
  const auto s = t.sums();
  EXPECT_EQ(s.responses, 4u);
  EXPECT_EQ(s.predicted_tokens, 160u);
  EXPECT_EQ(s.engine_cached_tokens, 190u);
  EXPECT_EQ(s.over_predicted_tokens, 20u);
  EXPECT_EQ(s.under_predicted_tokens, 50u);
  ASSERT_TRUE(s.accuracy());
  EXPECT_DOUBLE_EQ(*s.accuracy(), 1.0 - 70.0 / 210.0);  // sum max(p, e) = 100 + 50 + 60
}

// A pod's audit sums live in its PodState: a pods-file reload keeps them for an unchanged pod.
// Ensures what a slot engine's response says of its cache beyond its slots: more cached than any slot held is a
// host prompt cache; no more than they held where routing history promised more is slots only; anything within the
// block-rounding margin, or where history promised no more than the slots, says nothing.
TEST(PredictionTotals, SlotCacheEvidence) {
  EXPECT_EQ(routing::slotCacheEvidence(0.0, 0.9, 1000, 900), true);    // nothing in the slots, 900 cached
  EXPECT_EQ(routing::slotCacheEvidence(0.5, 0.9, 1000, 700), true);    // half held, 700 cached (> 500 + 100)
  EXPECT_EQ(routing::slotCacheEvidence(0.0, 0.9, 1000, 30), false);    // history promised 900: the slots were right
  EXPECT_EQ(routing::slotCacheEvidence(0.5, 0.9, 1000, 520), false);   // promised 900, got what the slots held
  EXPECT_EQ(routing::slotCacheEvidence(0.5, 0.55, 1000, 520), std::nullopt);  // both agree: no evidence
  EXPECT_EQ(routing::slotCacheEvidence(0.9, 0.9, 1000, 999), std::nullopt);
  EXPECT_EQ(routing::slotCacheEvidence(0.0, 0.3, 200, 60), std::nullopt);     // under the 64-token floor
  EXPECT_EQ(routing::slotCacheEvidence(NAN, 0.9, 1000, 999), std::nullopt);   // not a slot engine's pick
  EXPECT_EQ(routing::slotCacheEvidence(0.0, NAN, 1000, 10), std::nullopt);    // no history either
  EXPECT_EQ(routing::slotCacheEvidence(0.0, 0.0, 0, 0), std::nullopt);
}

TEST(PredictionTotals, SurviveAReloadOfAnUnchangedPod) {
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2)});
  pods.snapshot()->find("a")->signals().prediction().add(10, 8);
  pods.update({testing::podSpec("a", 1)});
  EXPECT_EQ(pods.snapshot()->find("a")->signals().prediction().sums().responses, 1u);
  EXPECT_EQ(pods.snapshot()->find("a")->signals().prediction().sums().over_predicted_tokens, 2u);
}

// The fraction is matched blocks x block size over the tokenized prompt's bytes, in the unit the prompt was cut
// in: text bytes for the character tokenizer, 4 bytes per token id for token-id prompts.
TEST(PredictedCache, FractionInTheUnitBlocksAreCutIn) {
  routing::PromptBlocks blocks;
  blocks.bytes = 16;
  blocks.block_bytes = 4;
  EXPECT_DOUBLE_EQ(blocks.fraction(3), 0.75);
  EXPECT_DOUBLE_EQ(blocks.fraction(0), 0.0);
  EXPECT_DOUBLE_EQ(blocks.fraction(5), 1.0);  // never above the whole prompt
  blocks.bytes = 0;
  EXPECT_DOUBLE_EQ(blocks.fraction(2), 0.0);
  routing::PrefixServices services(std::make_unique<tokenize::CharacterTokenizer>(), 4, 0,
                                   index::PrefixIndexOptions{100, std::chrono::minutes(20), 1});
  openai::RequestView text;
  text.prompt_text = "abcdefghij";
  services.hashPrompt(text, blocks);
  EXPECT_EQ(blocks.bytes, 10u);
  EXPECT_EQ(blocks.hashes.size(), 2u);
  openai::RequestView ids;
  ids.has_token_ids = true;
  ids.prompt_token_ids = {1, 2, 3};
  services.hashPrompt(ids, blocks);
  EXPECT_EQ(blocks.bytes, 12u);
  EXPECT_EQ(blocks.tokens, 3u);
  EXPECT_EQ(blocks.hashes.size(), 3u);
}

// The Router hands the prefix strategy's prediction for the chosen pod on in the Decision; a strategy without one
// (random) leaves it NaN.
TEST(PredictedCache, DecisionCarriesThePrediction) {
  config::Config config;
  config.discovery.file = "p.yaml";
  config.routing.strategy = "prefix-cache";
  config.routing.prefix_cache.block_size = 4;
  index::PrefixIndexOptions options;
  options.block_capacity = 1000;
  options.expiry = std::chrono::minutes(20);
  routing::PrefixServices services(std::make_unique<tokenize::CharacterTokenizer>(), 4, 0, options);
  prometheus::Registry registry;
  routing::PrefixMetrics prefix_metrics(registry);
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2)});
  for (const auto& p : pods.snapshot()->pods()) p->recordHealth(true, 1, 1);
  routing::Router router(routing::StrategyRegistry::builtin(),
                         routing::StrategyDeps{config, &services, &prefix_metrics}, pods, [] { return 0; });
  std::mt19937_64 rng{3};
  auto route = [&](const std::string& prompt, std::string_view strategy, bool dry = false) {
    openai::RequestView r;
    r.model = "m";
    r.prompt_text = prompt;
    return router.choose(routing::RouteQuery{r, strategy, "", {}, dry}, rng);
  };
  EXPECT_EQ(route("aaaabbbbccccdddd", "").ticket.facts().predicted_cached_fraction, 0.0);
  // 3 of the 4-byte blocks match on the pod that holds them; the prompt is 18 bytes.
  routing::Decision d = route("aaaabbbbccccXXXXYY", "", true);
  EXPECT_DOUBLE_EQ(d.ticket.facts().predicted_cached_fraction, 12.0 / 18.0);
  EXPECT_TRUE(std::isnan(route("aaaabbbbccccdddd", "random").ticket.facts().predicted_cached_fraction));
}

// The audit's series: counters by pod and the error histogram with buckets from -1 to 1.
TEST(PredictionAudit, MetricsSeries) {
  metrics::GatewayMetrics m;
  m.predictionAudited("a", 100, 80, 0.2);
  m.predictionAudited("a", 0, 16, -0.5);
  const std::string text = m.serialize(discovery::PodSet({}), 0);
  EXPECT_NE(text.find("prefixgate_prefix_predicted_tokens_total{pod=\"a\"} 100"), std::string::npos) << text;
  EXPECT_NE(text.find("prefixgate_prefix_engine_cached_tokens_total{pod=\"a\"} 96"), std::string::npos);
  EXPECT_NE(text.find("prefixgate_prefix_prediction_audited_responses_total{pod=\"a\"} 2"), std::string::npos);
  EXPECT_NE(text.find("prefixgate_prefix_prediction_error_ratio_bucket{pod=\"a\",le=\"-1\"} 0"), std::string::npos);
  EXPECT_NE(text.find("prefixgate_prefix_prediction_error_ratio_bucket{pod=\"a\",le=\"-0.5\"} 1"), std::string::npos);
  EXPECT_NE(text.find("prefixgate_prefix_prediction_error_ratio_bucket{pod=\"a\",le=\"0.25\"} 2"), std::string::npos);
  EXPECT_NE(text.find("prefixgate_prefix_prediction_error_ratio_count{pod=\"a\"} 2"), std::string::npos);
}

}  // namespace
}  // namespace prefixgate
