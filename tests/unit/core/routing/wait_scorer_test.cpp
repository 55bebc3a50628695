// The wait scorer's parts: the per-pod service rates learned from responses (ServiceRates), the prefill
// queue the Router counts per pod until the first byte (PrefillGuard, Decision::sent), and the scores
// (candidateRates, waitScores) on hand-made candidates and through the Router on the real index.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "discovery/pod_set.h"
#include "routing/load_guards.h"
#include "routing/service_rates.h"
#include "routing/prefix/selection.h"
#include "routing/prefix/window_loads.h"
#include "routing/load_score.h"
#include "routing/router.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::routing {
namespace {


// Ensures a pod without samples reads the documented defaults.
TEST(ServiceRates, DefaultsUntilTheFirstSample) {
  ServiceRates rates;
  const ServiceRates::Rates r = rates.read();
  EXPECT_EQ(r.samples, 0u);
  EXPECT_DOUBLE_EQ(r.base_s, ServiceRates::kDefaults.base_s);
  EXPECT_DOUBLE_EQ(r.prefill_s_per_token, 1.0 / 25000);
  EXPECT_DOUBLE_EQ(r.queue_s_per_token, 1.0 / 25000);
}

// Ensures the fit recovers a pod's true rates from noisy responses: base 50 ms, 5,000 prefill tokens/s for its own
// tokens, queued tokens at half that cost, 2 ms per decoding request.
TEST(ServiceRates, LearnsEachRateFromNoisyResponses) {
  ServiceRates rates;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> own(50, 3000), queued(0, 4000), decoding(0, 40);
  std::normal_distribution<double> noise(0, 0.005);
  for (int i = 0; i < 400; ++i) {
    const double o = own(rng), q = queued(rng), d = decoding(rng);
    rates.add(o, q, d, std::max(0.0, 0.05 + o / 5000 + q / 10000 + 0.002 * d + noise(rng)));
  }
  const ServiceRates::Rates r = rates.read();
  EXPECT_EQ(r.samples, 400u);
  EXPECT_NEAR(r.base_s, 0.05, 0.01);
  EXPECT_NEAR(1 / r.prefill_s_per_token, 5000, 250);
  EXPECT_NEAR(1 / r.queue_s_per_token, 10000, 1000);
  EXPECT_NEAR(r.decode_s_per_request, 0.002, 0.0003);
}

// Ensures old responses fade: a pod that became 4x slower is measured so within a few hundred responses.
TEST(ServiceRates, FollowsAPodThatSlowsDown) {
  ServiceRates rates;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> own(100, 2000);
  for (int i = 0; i < 200; ++i) {
    const double o = own(rng);
    rates.add(o, 0, 0, 0.02 + o / 20000);
  }
  EXPECT_NEAR(1 / rates.read().prefill_s_per_token, 20000, 1000);
  for (int i = 0; i < 300; ++i) {
    const double o = own(rng);
    rates.add(o, 0, 0, 0.02 + o / 5000);
  }
  EXPECT_NEAR(1 / rates.read().prefill_s_per_token, 5000, 500);
}

// Ensures nonsense is ignored and the fit stays within its clamps: negative or non-finite numbers add nothing, and
// responses that all look alike (no spread in tokens) keep the prior's slopes instead of dividing by nothing.
TEST(ServiceRates, IgnoresNonsenseAndStaysSane) {
  ServiceRates rates;
  rates.add(-1, 0, 0, 0.1);
  rates.add(100, NAN, 0, 0.1);
  rates.add(100, 0, 0, INFINITY);
  rates.add(100, 0, -2, 0.1);
  EXPECT_EQ(rates.read().samples, 0u);
  for (int i = 0; i < 50; ++i) rates.add(500, 0, 0, 0.04);
  const ServiceRates::Rates r = rates.read();
  EXPECT_EQ(r.samples, 50u);
  EXPECT_GT(r.prefill_s_per_token, ServiceRates::kMinPrefillSPerToken);
  EXPECT_LE(r.prefill_s_per_token, ServiceRates::kMaxPrefillSPerToken);
  EXPECT_NEAR(r.base_s + 500 * r.prefill_s_per_token, 0.04, 0.002);  // what it saw, it predicts
  EXPECT_GE(r.queue_s_per_token, 0);
  for (int i = 0; i < 50; ++i) rates.add(10, 5000, 0, 0);  // a queue that seems to shorten the wait: clamped at 0
  EXPECT_GE(rates.read().queue_s_per_token, 0);
  EXPECT_GE(rates.read().base_s, 0);
}

std::vector<Candidate> waitCandidates(std::vector<int32_t> in_flight, std::vector<int32_t> prefill_requests,
                                      std::vector<double> prefill_tokens) {
  std::vector<Candidate> out;
  for (size_t i = 0; i < in_flight.size(); ++i) {
    Candidate c;
    c.pod_id = PodId{uint32_t(i + 1)};
    c.in_flight = in_flight[i];
    c.prefill_requests = prefill_requests[i];
    c.prefill_tokens = prefill_tokens[i];
    out.push_back(c);
  }
  return out;
}

// Ensures the wait is base + own uncached tokens x prefill rate + queued tokens x queue rate + decoding x decode
// rate, and that it is the score (lowest wait wins).
TEST(WaitScores, PartsAddUpToTheScore) {
  std::vector<Candidate> cs = waitCandidates({3, 0}, {1, 0}, {1000, 0});
  const double uncached[] = {100, 2000};
  const ServiceRates::Rates rates[] = {{0.02, 1e-4, 5e-5, 0.001, 10}, {0.03, 2e-4, 1e-4, 0.002, 10}};
  std::vector<Explanation> why(2);
  waitScores(cs, uncached, 2000, rates, 1, why);
  EXPECT_DOUBLE_EQ(why[0].get("base_ms") / 1000, 0.02);
  EXPECT_DOUBLE_EQ(why[0].get("prefill_ms") / 1000, 100 * 1e-4);
  EXPECT_DOUBLE_EQ(why[0].get("queue_ms") / 1000, 1000 * 5e-5);
  EXPECT_DOUBLE_EQ(why[0].get("decode_ms") / 1000, 2 * 0.001);  // 3 in flight, 1 of them not begun
  EXPECT_DOUBLE_EQ(why[0].get("total_ms") / 1000, 0.02 + 0.01 + 0.05 + 0.002);
  EXPECT_DOUBLE_EQ(why[1].get("total_ms") / 1000, 0.03 + 0.4);
  // The fleet's extra prefill: none for the pod missing least, 1,900 tokens at its own rate for the other.
  EXPECT_DOUBLE_EQ(why[0].get("fleet_work_ms") / 1000, 0);
  EXPECT_DOUBLE_EQ(why[1].get("fleet_work_ms") / 1000, 1900 * 2e-4);
  EXPECT_DOUBLE_EQ(cs[0].score, -why[0].get("total_ms") / 1000);
  EXPECT_DOUBLE_EQ(cs[1].score, -(why[1].get("total_ms") / 1000 + why[1].get("fleet_work_ms") / 1000));
  EXPECT_DOUBLE_EQ(cs[1].load_score, why[1].get("total_ms") / 1000);
}

// Ensures "sticky until saturated": the warm pod (little to compute) wins while its queue costs less than what a
// move costs (the prompt's prefill elsewhere, and with fleet_work_weight 1 that extra prefill again), and loses
// once it costs more.
TEST(WaitScores, StickyUntilTheQueueOutweighsTheSaving) {
  const ServiceRates::Rates r = ServiceRates::kDefaults;
  const ServiceRates::Rates rates[] = {r, r};
  const double uncached[] = {40, 1040};  // the warm pod saves 1,000 tokens
  std::mt19937_64 rng(1);
  auto pick = [&](double queued, double weight) {
    std::vector<Candidate> cs = waitCandidates({1, 0}, {1, 0}, {queued, 0});
    waitScores(cs, uncached, 1040, rates, weight);
    return pickBest(cs, rng);
  };
  for (double queued : {0.0, 500.0, 990.0}) EXPECT_EQ(pick(queued, 0), 0u) << queued;
  EXPECT_EQ(pick(1010, 0), 1u);
  EXPECT_EQ(pick(1990, 1), 0u);  // the move would also cost the fleet 1,000 tokens
  EXPECT_EQ(pick(2010, 1), 1u);
}

// Ensures new work (no candidate holds half the prompt) goes to the candidates sent the fewest requests over the
// window when the window loads are skewed past the ratio, and that a mostly cached prompt, even loads or ratio 0
// leave the wait scores alone.
TEST(WaitScores, NewWorkBalancesSkewedWindowLoads) {
  auto scored = [] {
    std::vector<Candidate> cs = waitCandidates({0, 0, 0}, {0, 0, 0}, {0, 0, 0});
    cs[0].score = -0.01;  // the shortest wait
    cs[1].score = -0.05;
    cs[2].score = -0.08;
    return cs;
  };
  std::mt19937_64 rng(1);
  const double skewed[] = {30, 20, 10};
  std::vector<Candidate> cs = scored();
  EXPECT_TRUE(balanceNewWork(cs, 0.3, skewed, 1.2));
  EXPECT_EQ(pickBest(cs, rng), 2u);  // the least loaded, though its wait is the longest
  EXPECT_LT(cs[0].score, cs[2].score);
  cs = scored();
  EXPECT_FALSE(balanceNewWork(cs, 0.6, skewed, 1.2));  // mostly cached somewhere: the wait decides
  EXPECT_EQ(pickBest(cs, rng), 0u);
  const double even[] = {11, 10, 10};
  cs = scored();
  EXPECT_FALSE(balanceNewWork(cs, 0.3, even, 1.2));  // 11 <= 1.2 x 10
  EXPECT_FALSE(balanceNewWork(cs, 0.3, skewed, 0));  // off
  EXPECT_EQ(pickBest(cs, rng), 0u);
}

// Ensures the engine's waiting requests beyond this gateway's own count as queued work (other replicas', other
// clients'), at the mean size of this gateway's queued requests there, else at this request's size.
TEST(WaitScores, EngineWaitingBeyondOursCountsAsQueue) {
  Candidate c;
  c.waiting = 5;
  c.prefill_requests = 2;
  c.prefill_tokens = 600;
  EXPECT_DOUBLE_EQ(queuedElsewhere(c, 1000), 3 * 300);
  c.prefill_requests = 0;
  c.prefill_tokens = 0;
  EXPECT_DOUBLE_EQ(queuedElsewhere(c, 1000), 5 * 1000);
  c.waiting = 1;
  c.prefill_requests = 3;
  EXPECT_DOUBLE_EQ(queuedElsewhere(c, 1000), 0);
}

// Ensures a pod with fewer than min_samples responses is scored with the median rates of those that have them (with
// the defaults when none has), and that pods 4x apart keep their own rates.
TEST(WaitScores, FewSamplesBorrowTheFleetsRates) {
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2), testing::podSpec("c", 3)});
  auto a = pods.snapshot()->find("a"), b = pods.snapshot()->find("b"), c = pods.snapshot()->find("c");
  std::vector<Candidate> cs(3);
  cs[0].pod = a.get();
  cs[1].pod = b.get();
  cs[2].pod = c.get();
  std::vector<ServiceRates::Rates> out(3);
  WaitSettings settings;
  candidateRates(cs, settings, out);
  for (const auto& r : out) EXPECT_DOUBLE_EQ(r.prefill_s_per_token, ServiceRates::kDefaults.prefill_s_per_token);
  for (int i = 0; i < 40; ++i) {
    const double own = 100 + 50 * i;
    a->signals().rates().add(own, 0, 0, 0.01 + own / 10000);
    b->signals().rates().add(own, 0, 0, 0.01 + own / 2500);
  }
  for (int i = 0; i < 3; ++i) c->signals().rates().add(1000, 0, 0, 5);  // 3 samples: not enough
  candidateRates(cs, settings, out);
  EXPECT_NEAR(1 / out[0].prefill_s_per_token, 10000, 800);
  EXPECT_NEAR(1 / out[1].prefill_s_per_token, 2500, 200);
  EXPECT_DOUBLE_EQ(out[2].prefill_s_per_token, (out[0].prefill_s_per_token + out[1].prefill_s_per_token) / 2);
  EXPECT_DOUBLE_EQ(out[2].base_s, (out[0].base_s + out[1].base_s) / 2);  // the median of two
}

// Ensures a fleet where no pod has min_samples streams of its own is scored with the model's rates pooled over its
// pods once the pool has that many (not with kDefaults, an H100's, against which a slow engine's cold prefill looks
// nearly free), per model; and that once a pod has its own the fleet's median of those wins over the pool.
TEST(WaitScores, AFleetWithoutItsOwnRatesTakesTheModelsPooledOnes) {
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2)});
  auto a = pods.snapshot()->find("a"), b = pods.snapshot()->find("b");
  std::vector<Candidate> cs(2);
  cs[0].pod = a.get();
  cs[1].pod = b.get();
  std::vector<ServiceRates::Rates> out(2);
  WaitSettings settings;
  ModelRates pooled;
  // Four streams each on two pods: 3,000 prefill tokens/s (a CPU engine), as their pool learns it.
  for (int i = 0; i < 4; ++i) {
    for (auto& pod : {a, b}) {
      const double own = 500 + 300 * i;
      pod->signals().rates().add(own, 0, 0, 0.05 + own / 3000);
      pooled.add("m", own, 0, 0, 0.05 + own / 3000);
    }
    if (i == 0) {  // two streams pooled: too few yet
      candidateRates(cs, settings, out, &pooled, "m");
      EXPECT_DOUBLE_EQ(out[0].prefill_s_per_token, ServiceRates::kDefaults.prefill_s_per_token);
    }
  }
  candidateRates(cs, settings, out, &pooled, "other");  // another model's: nothing pooled
  EXPECT_DOUBLE_EQ(out[0].prefill_s_per_token, ServiceRates::kDefaults.prefill_s_per_token);
  candidateRates(cs, settings, out, &pooled, "m");
  for (const auto& r : out) EXPECT_NEAR(1 / r.prefill_s_per_token, 3000, 1500);  // (a weak prior: 8 streams)
  EXPECT_EQ(out[0].samples, 0u);  // the fleet's
  // Pod a reaches min_samples at twice the speed: the fleet's median (a's alone) now, not the pool.
  for (int i = 0; i < 8; ++i) a->signals().rates().add(500 + 300 * i, 0, 0, 0.05 + (500 + 300 * i) / 6000.0);
  candidateRates(cs, settings, out, &pooled, "m");
  EXPECT_DOUBLE_EQ(out[1].prefill_s_per_token, out[0].prefill_s_per_token);
  EXPECT_GT(1 / out[1].prefill_s_per_token, 4000);
}

// Ensures pods whose learned speeds differ by less than speed_tolerance are scored alike (the fleet's median
// rates: their difference is noise; the slow pod does not drag that median), and a pod beyond it keeps its own.
TEST(WaitScores, PodsWithinTheToleranceShareTheFleetsRates) {
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1), testing::podSpec("b", 2), testing::podSpec("c", 3)});
  std::vector<Candidate> cs(3);
  const double rate[] = {40000, 50000, 10000};  // a and b alike, c 4x slower
  for (size_t i = 0; i < 3; ++i) {
    auto pod = pods.snapshot()->pods()[i];
    cs[i].pod = pod.get();
    for (int k = 0; k < 60; ++k) {
      const double own = 100 + 40 * k;
      pod->signals().rates().add(own, 0, 0, 0.005 + own / rate[i]);
    }
  }
  std::vector<ServiceRates::Rates> out(3);
  WaitSettings settings;
  candidateRates(cs, settings, out);
  EXPECT_DOUBLE_EQ(out[0].prefill_s_per_token, out[1].prefill_s_per_token);  // the fleet's median
  EXPECT_NEAR(1 / out[2].prefill_s_per_token, 10000, 800);
  settings.speed_tolerance = 0;  // every pod its own
  candidateRates(cs, settings, out);
  EXPECT_NEAR(1 / out[0].prefill_s_per_token, 40000, 3000);
  EXPECT_NEAR(1 / out[1].prefill_s_per_token, 50000, 4000);
}

// Ensures the window loads sum what was added over the last window per pod, keep the sum current between reads
// within a bucket, and forget what is older than the window.
TEST(WindowLoads, SumOverTheWindowPerPod) {
  WindowLoads loads(6000);  // 60 buckets of 100 ms
  std::vector<Candidate> cs(2);
  cs[0].pod_id = PodId{1};
  cs[1].pod_id = PodId{2};
  double out[2];
  loads.add(PodId{1}, 2, 1000);
  loads.read(cs, 1000, out);
  EXPECT_DOUBLE_EQ(out[0], 2);
  EXPECT_DOUBLE_EQ(out[1], 0);
  loads.add(PodId{1}, 3, 1050);  // same bucket, after a read
  loads.read(cs, 1060, out);
  EXPECT_DOUBLE_EQ(out[0], 5);
  loads.add(PodId{2}, 1, 4000);
  loads.read(cs, 4000, out);
  EXPECT_DOUBLE_EQ(out[0], 5);
  EXPECT_DOUBLE_EQ(out[1], 1);
  loads.read(cs, 7050, out);  // 6,050 ms after the first adds: their bucket left the window
  EXPECT_DOUBLE_EQ(out[0], 0);
  EXPECT_DOUBLE_EQ(out[1], 1);
}

// Ensures the prefill queue counts a request's tokens to prefill from its choice until the guard is reset (the
// relay's first byte), whatever happens after.
TEST(PrefillGuard, CountsUntilReset) {
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1)});
  auto a = pods.snapshot()->find("a");
  {
    PrefillGuard g1(a, 300);
    PrefillGuard g2(a, 200);
    EXPECT_EQ(a->signals().prefillRequests(), 2);
    EXPECT_EQ(a->signals().prefillTokens(), 500);
    g1.reset();
    EXPECT_EQ(a->signals().prefillTokens(), 200);
    PrefillGuard moved = std::move(g2);
    EXPECT_EQ(a->signals().prefillRequests(), 1);
  }
  EXPECT_EQ(a->signals().prefillRequests(), 0);
  EXPECT_EQ(a->signals().prefillTokens(), 0);
}

}  // namespace
}  // namespace prefixgate::routing
