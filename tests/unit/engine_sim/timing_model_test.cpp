// The step time model: what each part of a batch costs, the token scale, and the time scale.
#include "engine_sim/timing_model.h"

#include "engine_sim/sim_config.h"

#include <gtest/gtest.h>

namespace prefixgate::sim {
namespace {

using std::chrono::nanoseconds;

TimingConfig config(double token_scale = 1.0, double time_scale = 1.0) {
  TimingConfig c;  // the defaults: 25,000 prefill tokens/s, 15 ms step overhead, 4.5 ms + 0.046 ms per sequence
  c.token_scale = token_scale;
  c.time_scale = time_scale;
  return c;
}

StepWork decodeOnly(uint32_t sequences, uint64_t context) { return StepWork{sequences, 0, context, 0}; }

// Ensures a decode step costs the weight pass, the per-sequence cost and the KV reads of its context.
TEST(TimingModel, DecodeStepGrowsWithBatchAndContext) {
  EXPECT_DOUBLE_EQ(stepMilliseconds(config(), decodeOnly(0, 0)), 4.5);
  EXPECT_DOUBLE_EQ(stepMilliseconds(config(), decodeOnly(100, 0)), 4.5 + 4.6);
  EXPECT_DOUBLE_EQ(stepMilliseconds(config(), decodeOnly(1, 100000)), 4.5 + 0.046 + 5.0);
  EXPECT_LT(stepMilliseconds(config(), decodeOnly(10, 1000)), stepMilliseconds(config(), decodeOnly(10, 50000)));
}

// Ensures a step that prefills adds the overhead, the linear cost of its new tokens and their attention pairs.
TEST(TimingModel, PrefillCostsOverheadTokensAndPairs) {
  StepWork work{1, 2500, 0, 2e6};
  EXPECT_DOUBLE_EQ(stepMilliseconds(config(), work), 4.5 + 0.046 + 15 + 100 + 2.6);
}

// Ensures the work of a plan is split into prefill tokens, decode context and attention pairs.
TEST(TimingModel, StepWorkOfPlan) {
  StepPlan plan;
  plan.entries.push_back(StepEntry{1, 1, 99, true});        // decode with 99 tokens before it
  plan.entries.push_back(StepEntry{2, 10, 20, false});      // a prefill chunk after 20 computed tokens
  StepWork work = stepWork(plan);
  EXPECT_EQ(work.sequences, 2u);
  EXPECT_EQ(work.prefill_tokens, 10u);
  EXPECT_EQ(work.decode_context, 100u);
  EXPECT_DOUBLE_EQ(work.prefill_pairs, 10 * (20 + 5.5));
}

// Ensures the pairs of new tokens with tokens computed before the step are counted apart, and cost
// --context-attention-ms-per-m-pairs when it is set (llama.cpp's short prompt after a long cached prefix) and the
// prefill coefficient when it is not (-1, the default: a step costs what it always did).
TEST(TimingModel, ContextPairsCostTheirOwnCoefficientWhenSet) {
  StepPlan plan;
  plan.entries.push_back(StepEntry{1, 60, 1500, false});  // 60 new tokens after a cached 1,500
  plan.entries.push_back(StepEntry{2, 1000, 0, false});   // a cold prompt: no context pairs
  StepWork work = stepWork(plan);
  EXPECT_DOUBLE_EQ(work.context_pairs, 60.0 * 1500);
  EXPECT_DOUBLE_EQ(work.prefill_pairs, 60 * (1500 + 30.5) + 1000 * 500.5);
  TimingConfig base = config();
  const double unset = stepMilliseconds(base, work);
  EXPECT_DOUBLE_EQ(unset, 4.5 + 2 * 0.046 + 15 + 1000.0 * 1060 / 25000 + 1.3 * work.prefill_pairs / 1e6);
  TimingConfig split = base;
  split.context_attention_ms_per_m_pairs = 500;
  EXPECT_NEAR(stepMilliseconds(split, work) - unset, (500 - 1.3) * 60 * 1500 / 1e6, 1e-9);
  split.context_attention_ms_per_m_pairs = 0;  // set to 0: the context pairs are free
  EXPECT_NEAR(unset - stepMilliseconds(split, work), 1.3 * 60 * 1500 / 1e6, 1e-9);
  // The token scale applies as to every pair: k^2.
  split.context_attention_ms_per_m_pairs = 500;
  split.prefill_attention_ms_per_m_pairs = 0;
  split.prefill_tokens_per_s = 1e300;
  split.token_scale = 0.5;
  EXPECT_NEAR(stepMilliseconds(split, work), (4.5 + 2 * 0.046) / 0.5 + 15 + 500 * 60 * 1500 / 1e6 / 0.25, 1e-9);
}

// Ensures the flag reaches the timing config, and that only -1 (unset) or a coefficient >= 0 is accepted.
TEST(TimingModel, ContextAttentionFlagIsValidated) {
  SimConfig sim;
  EXPECT_EQ(validateConfig(sim), "");
  EXPECT_EQ(sim.timingConfig().context_attention_ms_per_m_pairs, -1);
  sim.context_attention_ms_per_m_pairs = 250;
  EXPECT_EQ(validateConfig(sim), "");
  EXPECT_EQ(sim.timingConfig().context_attention_ms_per_m_pairs, 250);
  sim.context_attention_ms_per_m_pairs = -2;
  EXPECT_NE(validateConfig(sim).find("--context-attention-ms-per-m-pairs"), std::string::npos);
}

// Ensures --context-min-rows pads a thin prefill entry's context pairs up to the minimum width (flat in its new
// tokens below it), leaves wider entries, cold prompts and decodes alone, and that the padding costs as context
// pairs: the context coefficient when set, the prefill one when not.
TEST(TimingModel, ThinEntriesAttendToTheirContextAtTheMinimumWidth) {
  StepPlan plan;
  plan.entries.push_back(StepEntry{1, 60, 1500, false});   // thin: padded to 200 rows
  plan.entries.push_back(StepEntry{2, 700, 450, false});   // wider than the minimum: its own pairs only
  plan.entries.push_back(StepEntry{3, 100, 0, false});     // cold: no context to pad
  plan.entries.push_back(StepEntry{4, 1, 900, true});      // a decode
  EXPECT_DOUBLE_EQ(stepWork(plan).padding_pairs, 0);       // off by default
  StepWork work = stepWork(plan, 200);
  EXPECT_DOUBLE_EQ(work.padding_pairs, (200.0 - 60) * 1500);
  EXPECT_DOUBLE_EQ(work.context_pairs, 60.0 * 1500 + 700.0 * 450);
  TimingConfig base = config();
  base.context_min_rows = 200;
  const double unpadded = stepMilliseconds(base, stepWork(plan));
  EXPECT_NEAR(stepMilliseconds(base, work) - unpadded, 1.3 * 140 * 1500 / 1e6, 1e-9);
  base.context_attention_ms_per_m_pairs = 400;
  EXPECT_NEAR(stepMilliseconds(base, work) - stepMilliseconds(base, stepWork(plan)), 400.0 * 140 * 1500 / 1e6, 1e-9);
  // Below the width the time does not grow with the new tokens' pairs: 20 or 60 new tokens attend as 200.
  StepPlan thinner;
  thinner.entries.push_back(StepEntry{1, 20, 1500, false});
  StepPlan thin;
  thin.entries.push_back(StepEntry{1, 60, 1500, false});
  base.prefill_tokens_per_s = 1e300;
  base.prefill_attention_ms_per_m_pairs = 0;
  EXPECT_NEAR(stepMilliseconds(base, stepWork(thinner, 200)), stepMilliseconds(base, stepWork(thin, 200)), 1e-9);
}

// Ensures the flag reaches the timing config and is validated.
TEST(TimingModel, ContextMinRowsFlagIsValidated) {
  SimConfig sim;
  EXPECT_EQ(sim.timingConfig().context_min_rows, 0);
  sim.context_min_rows = 150;
  EXPECT_EQ(validateConfig(sim), "");
  EXPECT_EQ(sim.timingConfig().context_min_rows, 150);
  sim.context_min_rows = -1;
  EXPECT_NE(validateConfig(sim).find("--context-min-rows"), std::string::npos);
}

// Ensures an entry that computes a single prompt token (a decode leg's last prompt token once its KV was pulled)
// costs as a decode: a step of such entries and decodes is a uniform decode batch, without the prefill overhead.
TEST(TimingModel, OneTokenPrefillIsADecodeRow) {
  StepPlan plan;
  plan.entries.push_back(StepEntry{1, 1, 99, true});
  plan.entries.push_back(StepEntry{2, 1, 4999, false});  // pulled 4,999 tokens, computes the 5,000th
  StepWork work = stepWork(plan);
  EXPECT_EQ(work.prefill_tokens, 0u);
  EXPECT_EQ(work.decode_context, 100u + 5000u);
  EXPECT_DOUBLE_EQ(work.prefill_pairs, 0);
  EXPECT_DOUBLE_EQ(stepMilliseconds(config(), work), stepMilliseconds(config(), decodeOnly(2, 5100)));
  // Two tokens are a prefill chunk: the mixed batch pays the overhead.
  plan.entries.back().new_tokens = 2;
  EXPECT_GT(stepMilliseconds(config(), stepWork(plan)), stepMilliseconds(config(), decodeOnly(2, 100)) + 15);
}

// Ensures a workload at token scale k takes as long as the full-size one: k times the tokens in a prefill step,
// and k times the steps (each 1/k as long) for decoding.
TEST(TimingModel, TokenScaleKeepsDurations) {
  const double k = 0.125;
  StepWork full_prefill{1, 7200, 0, 7200.0 * 3600.5};
  StepWork scaled_prefill{1, 900, 0, 900.0 * 450.5};
  EXPECT_NEAR(stepMilliseconds(config(k), scaled_prefill) - 4.546 / k,
              stepMilliseconds(config(), full_prefill) - 4.546, 0.05);
  // 1,000 full-size decode steps with 50 sequences of 8,000 context vs 125 scaled steps with 1,000 context.
  double full = 1000 * stepMilliseconds(config(), decodeOnly(50, 50 * 8000));
  double scaled = 125 * stepMilliseconds(config(k), decodeOnly(50, 50 * 1000));
  EXPECT_NEAR(scaled, full, 1e-6 * full);
}

// Ensures a step after a host cache restore (slots model) adds the copy's time, a restored token standing for 1/k
// real tokens like any other, and that a plan's restored tokens reach its work.
TEST(TimingModel, HostCacheRestoreAddsCopyTime) {
  StepWork work = decodeOnly(0, 0);
  work.restored_tokens = 4000;
  EXPECT_DOUBLE_EQ(stepMilliseconds(config(), work), 4.5 + 2.0);  // 0.5 ms per 1,000 tokens
  EXPECT_DOUBLE_EQ(stepMilliseconds(config(0.5), work) - stepMilliseconds(config(0.5), decodeOnly(0, 0)), 4.0);
  StepPlan plan;
  plan.restored_tokens = 7;
  EXPECT_EQ(stepWork(plan).restored_tokens, 7u);
}

// Ensures every delay is multiplied by the time scale (0.1 = ten times faster, 0 = no delay).
TEST(TimingModel, TimeScaleMultipliesDelays) {
  EXPECT_EQ(stepDuration(config(1, 1), decodeOnly(0, 0)), nanoseconds(4500000));
  EXPECT_EQ(stepDuration(config(1, 0.1), decodeOnly(0, 0)), nanoseconds(450000));
  EXPECT_EQ(stepDuration(config(1, 0), StepWork{1, 100000, 0, 0}), nanoseconds(0));
}

}  // namespace
}  // namespace prefixgate::sim
