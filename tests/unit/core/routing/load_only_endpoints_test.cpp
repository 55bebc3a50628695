// Rerank and score requests have no prompt to match: whatever strategy they would get, one that matches prompts
// becomes routing.load_only_strategy, and their text is never hashed nor recorded in the index.
#include <gtest/gtest.h>

#include <set>

#include "unit/core/pod_specs.h"
#include "unit/core/prefix_router_fixture.h"

namespace prefixgate::routing {
namespace {

class LoadOnlyEndpointsTest : public testing::PrefixRouterTest {
 protected:
  void SetUp() override {
    start({testing::podSpec("a", 1), testing::podSpec("b", 2)});
    request_.model = "m";
  }
  RouteQuery query(openai::Endpoint endpoint, std::string_view header = "", bool dry = false) {
    request_.endpoint = endpoint;
    request_.prompt_text = kText;
    return RouteQuery{request_, header, "", {}, dry};
  }
  static constexpr const char* kText = "aaaabbbbccccddddeeeeffffgggghhhh";  // 8 blocks
};

// Ensures a rerank or score request under the default prefix strategy (or a prefix strategy its header names) is
// planned with routing.load_only_strategy, and hashes nothing.
TEST_F(LoadOnlyEndpointsTest, PrefixStrategiesBecomeTheLoadOnlyStrategy) {
  for (auto endpoint : {openai::Endpoint::kRerank, openai::Endpoint::kScore}) {
    for (std::string_view header : {"", "prefix-cache", "prefill-cost"}) {
      RoutePlan plan = router_->plan(query(endpoint, header));
      EXPECT_EQ(plan.name, "least-request") << openai::endpointName(endpoint) << " " << header;
      EXPECT_FALSE(plan.wantsPromptTokens());
      Decision d = router_->choose(plan, query(endpoint, header), rng_);
      ASSERT_EQ(d.failure, RouteFailure::kNone);
      EXPECT_EQ(d.strategy, "least-request");
      EXPECT_FALSE(d.prompt);
      EXPECT_EQ(d.match_percent, -1);
    }
  }
}

// Ensures a load strategy the request names is kept, and the setting chooses the replacement.
TEST_F(LoadOnlyEndpointsTest, LoadStrategiesStayAndTheSettingChooses) {
  EXPECT_EQ(router_->plan(query(openai::Endpoint::kRerank, "random")).name, "random");
  config_.routing.load_only_strategy = "power-of-two";
  EXPECT_EQ(router_->plan(query(openai::Endpoint::kScore)).name, "power-of-two");
  config_.routing.load_only_strategy = "no-such";
  RoutePlan unknown = router_->plan(query(openai::Endpoint::kScore));
  EXPECT_EQ(unknown.strategy, nullptr);
  EXPECT_NE(unknown.message.find("routing.load_only_strategy"), std::string::npos);
}

// Ensures chat, completions and embeddings keep their prefix strategy (the control of the tests above).
TEST_F(LoadOnlyEndpointsTest, OtherEndpointsKeepTheirStrategy) {
  for (auto endpoint : {openai::Endpoint::kChatCompletions, openai::Endpoint::kCompletions,
                        openai::Endpoint::kEmbeddings})
    EXPECT_EQ(router_->plan(query(endpoint)).name, "prefix-cache") << openai::endpointName(endpoint);
}

// Ensures identical rerank requests are never pinned to the pod of the first: nothing is recorded, so a chat request
// with the same text afterwards finds no prefix anywhere, while a chat request's text is found on its pod.
TEST_F(LoadOnlyEndpointsTest, NothingIsRecordedAndIdenticalRequestsSpread) {
  std::set<std::string> pods;
  for (int i = 0; i < 40; ++i) {
    Decision d = router_->choose(query(openai::Endpoint::kRerank), rng_);
    ASSERT_TRUE(d.pod);
    pods.insert(d.pod->name());
  }
  EXPECT_EQ(pods.size(), 2u);  // ties between idle pods go either way
  Decision chat = router_->choose(query(openai::Endpoint::kChatCompletions, "", true), rng_);
  for (const Candidate& c : chat.candidates) EXPECT_EQ(c.match_percent, 0) << c.pod->name();
  Decision first = router_->choose(query(openai::Endpoint::kChatCompletions), rng_);
  Decision again = router_->choose(query(openai::Endpoint::kChatCompletions, "", true), rng_);
  for (const Candidate& c : again.candidates)
    EXPECT_EQ(c.match_percent, c.pod == first.pod.get() ? 100 : 0) << c.pod->name();
}

}  // namespace
}  // namespace prefixgate::routing
