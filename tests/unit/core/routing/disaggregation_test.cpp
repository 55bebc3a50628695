// Disaggregated prefill/decode in routing: which pods serve which leg, the decode leg's choice by load, and the
// prompt the decode pod receives recorded for it (and taken back when its attempt fails before it computed it).
#include <gtest/gtest.h>

#include <set>

#include "unit/core/pod_specs.h"
#include "unit/core/prefix_router_fixture.h"

namespace prefixgate::routing {
namespace {

discovery::PodSpec rolePod(const std::string& name, uint16_t port, PodRole role) {
  discovery::PodSpec spec = testing::podSpec(name, port);
  spec.role = role;
  return spec;
}

// prefix-cache over two prefill pods (p0, p1), two decode pods (d0, d1) and one both pod (b), on the character
// tokenizer (4 characters a block).
class DisaggregationTest : public testing::PrefixRouterTest {
 protected:
  void SetUp() override {
    start({rolePod("p0", 1, PodRole::kPrefill), rolePod("p1", 2, PodRole::kPrefill), rolePod("d0", 3, PodRole::kDecode),
           rolePod("d1", 4, PodRole::kDecode), rolePod("b", 5, PodRole::kBoth)});
    request_.model = "m";
    request_.stream = true;
  }
  RouteQuery query(const std::string& prompt, PodRole leg, bool dry = false) {
    request_.prompt_text = prompt;
    RouteQuery q{request_, "", "", {}, dry};
    q.leg = leg;
    return q;
  }
  static std::set<std::string> names(const Decision& d) {
    std::set<std::string> out;
    for (const Candidate& c : d.candidates) out.insert(c.pod->name());
    return out;
  }
  int matchOf(const std::string& prompt, const std::string& pod) {
    Decision d = router_->choose(query(prompt, PodRole::kBoth, true), rng_);
    for (const Candidate& c : d.candidates)
      if (c.pod->name() == pod) return c.match_percent;
    return -1;
  }
};

const std::string kPrompt = "aaaabbbbccccddddeeeeffffgggghhhh";  // 8 blocks

// Ensures a model is disaggregated only with prefill pods and decode pods both present, whatever their readiness.
TEST(PodSetRoles, AModelIsDisaggregatedWithPrefillAndDecodePods) {
  discovery::PodRegistry pods;
  pods.update({rolePod("p", 1, PodRole::kPrefill), rolePod("b", 2, PodRole::kBoth)});
  EXPECT_FALSE(pods.snapshot()->disaggregated("m"));
  pods.update({rolePod("p", 1, PodRole::kPrefill), rolePod("d", 2, PodRole::kDecode)});
  EXPECT_TRUE(pods.snapshot()->disaggregated("m"));
  EXPECT_FALSE(pods.snapshot()->disaggregated("other"));
  pods.update({rolePod("d", 2, PodRole::kDecode), testing::podSpec("x", 3)});
  EXPECT_FALSE(pods.snapshot()->disaggregated("m"));
}

// Ensures each leg's candidates: the prefill leg prefill and both pods, the decode leg decode and both pods, and a
// whole request of a disaggregated model never a prefill pod (of a model that is not, every pod).
TEST(ServesLeg, EachLegItsRoles) {
  EXPECT_TRUE(servesLeg(PodRole::kPrefill, PodRole::kPrefill, true));
  EXPECT_TRUE(servesLeg(PodRole::kBoth, PodRole::kPrefill, true));
  EXPECT_FALSE(servesLeg(PodRole::kDecode, PodRole::kPrefill, true));
  EXPECT_TRUE(servesLeg(PodRole::kDecode, PodRole::kDecode, true));
  EXPECT_FALSE(servesLeg(PodRole::kPrefill, PodRole::kDecode, true));
  EXPECT_FALSE(servesLeg(PodRole::kPrefill, PodRole::kBoth, true));
  EXPECT_TRUE(servesLeg(PodRole::kPrefill, PodRole::kBoth, false));
  EXPECT_TRUE(servesLeg(PodRole::kDecode, PodRole::kBoth, true));
}

TEST_F(DisaggregationTest, EachLegChoosesAmongItsPods) {
  ASSERT_TRUE(router_->disaggregated("m"));
  RouteQuery q = query(kPrompt, PodRole::kPrefill);
  Decision prefill = router_->choose(q, rng_);
  ASSERT_EQ(prefill.failure, RouteFailure::kNone);
  EXPECT_EQ(names(prefill), (std::set<std::string>{"p0", "p1", "b"}));
  Decision decode = router_->chooseDecode(q, prefill, rng_);
  ASSERT_EQ(decode.failure, RouteFailure::kNone);
  EXPECT_EQ(names(decode), (std::set<std::string>{"d0", "d1", "b"}));
  EXPECT_EQ(decode.strategy, "least-request");  // disaggregation.decode_strategy's default
  EXPECT_EQ(decode.plan.leg, PodRole::kDecode);
  Decision whole = router_->choose(query(kPrompt, PodRole::kBoth), rng_);
  EXPECT_EQ(names(whole), (std::set<std::string>{"d0", "d1", "b"}));
}

// Ensures the decode pod is recorded as holding the prompt the prefill pod computed (both agree with what KV events
// would say), that a failed decode attempt takes back only what it added, and that a failed-over decode leg records
// for its new pod.
TEST_F(DisaggregationTest, TheDecodePodHoldsThePromptItReceived) {
  RouteQuery q = query(kPrompt, PodRole::kPrefill);
  Decision prefill = router_->choose(q, rng_);
  Decision decode = router_->chooseDecode(q, prefill, rng_);
  const std::string prefill_pod = prefill.pod->name(), decode_pod = decode.pod->name();
  EXPECT_EQ(matchOf(kPrompt, decode_pod), 100);
  EXPECT_EQ(decode.ticket.facts().held_blocks, 0u);
  decode.ticket.attemptFailed(AttemptFailure::kNotComputed);
  EXPECT_EQ(matchOf(kPrompt, decode_pod), 0);
  // The prefill pod computed it: its record stays.
  Decision probe = router_->choose(query(kPrompt, PodRole::kPrefill, true), rng_);
  for (const Candidate& c : probe.candidates)
    if (c.pod->name() == prefill_pod) EXPECT_EQ(c.match_percent, 100);

  const PodId tried[] = {decode.pod->id()};
  Decision again = router_->chooseAgain(decode, RouteQuery{request_, "", "", tried, false}, rng_);
  ASSERT_EQ(again.failure, RouteFailure::kNone);
  EXPECT_NE(again.pod->name(), decode_pod);
  EXPECT_EQ(matchOf(kPrompt, again.pod->name()), 100);
}

// Ensures a dry run of the decode leg records nothing, and that no ready decode pod is a 503 naming the leg.
TEST_F(DisaggregationTest, DryRunsRecordNothingAndAMissingLegSaysWhich) {
  RouteQuery dry = query(kPrompt, PodRole::kPrefill, true);
  Decision prefill = router_->choose(dry, rng_);
  Decision decode = router_->chooseDecode(dry, prefill, rng_);
  ASSERT_EQ(decode.failure, RouteFailure::kNone);
  EXPECT_EQ(matchOf(kPrompt, decode.pod->name()), 0);
  config_.health_check.panic_threshold_percent = 0;
  for (const char* name : {"d0", "d1", "b"}) pods_.snapshot()->find(name)->recordHealth(false, 1, 1);
  Decision none = router_->chooseDecode(query(kPrompt, PodRole::kPrefill), prefill, rng_);
  EXPECT_EQ(none.failure, RouteFailure::kNoReadyPod);
  EXPECT_NE(none.message.find("no ready decode pod"), std::string::npos) << none.message;
}

// Ensures the prefill side is busy only when every ready pod taking prefill legs (prefill and both pods, decode pods
// never) has the given requests in flight, other replicas' included, and that a pod out of service does not count.
TEST_F(DisaggregationTest, ThePrefillPoolIsBusyWhenEveryPrefillPodIs) {
  auto pod = [&](const char* name) { return pods_.snapshot()->find(name); };
  EXPECT_FALSE(router_->prefillPoolBusy("m", 1));
  for (const char* name : {"d0", "d1"}) pod(name)->signals().addInFlight();  // decode pods do not count
  pod("p0")->signals().addInFlight();
  pod("p1")->signals().addInFlight();
  EXPECT_FALSE(router_->prefillPoolBusy("m", 1));  // b, a both pod, still takes prefill legs
  pod("b")->signals().setRemoteInFlight(1, 1);     // another replica's request
  EXPECT_TRUE(router_->prefillPoolBusy("m", 1));
  EXPECT_FALSE(router_->prefillPoolBusy("m", 2));
  EXPECT_FALSE(router_->prefillPoolBusy("other", 1));  // no pod serves it
  pod("p0")->signals().releaseInFlight();
  EXPECT_FALSE(router_->prefillPoolBusy("m", 1));
  config_.health_check.panic_threshold_percent = 0;
  pod("p0")->recordHealth(false, 1, 1);  // out of service: the others decide
  EXPECT_TRUE(router_->prefillPoolBusy("m", 1));
  for (const char* name : {"p1", "b"}) pod(name)->recordHealth(false, 1, 1);
  EXPECT_FALSE(router_->prefillPoolBusy("m", 1));  // no prefill pod: the prefill leg itself fails, not "busy"
}

}  // namespace
}  // namespace prefixgate::routing
