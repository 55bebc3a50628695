// The steps before the relay (server/request_preparation.h), with a real Router over two pods, spy strategies that
// record what the request carried when they scored it, a fake remote tokenizer, and the real credentials and
// metrics: what stops a request, in which order, and what a dry run leaves untouched.
#include "server/request_preparation.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "auth/credentials.h"
#include "metrics/api_key_metrics.h"
#include "metrics/gateway_metrics.h"
#include "routing/prefix/prefix_metrics.h"
#include "server/client_auth.h"
#include "tokenize/remote_tokenizer.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::server {
namespace {

namespace asio = boost::asio;
using openai::GatewayError;
using RemoteTokens = openai::RequestView::RemoteTokens;

// Answers every call at once with `outcome` (and `tokens` when it is a success); counts the calls.
class FakeTokenizer final : public tokenize::PromptTokenizer {
 public:
  asio::awaitable<tokenize::TokenizeResult> tokenize(const tokenize::TokenizeInput& input,
                                                     tokenize::ConnectionPool*) override {
    ++calls;
    tokenize::TokenizeResult result;
    result.outcome = outcome;
    if (outcome == tokenize::TokenizeOutcome::kMiss || outcome == tokenize::TokenizeOutcome::kHit)
      result.tokens = std::make_shared<const std::vector<uint32_t>>(tokens);
    else
      result.error = "fake failure for " + std::string(input.model);
    co_return result;
  }
  int calls = 0;
  tokenize::TokenizeOutcome outcome = tokenize::TokenizeOutcome::kMiss;
  std::vector<uint32_t> tokens{7, 8, 9};
};

// What a spy strategy saw of the requests it scored and picked for.
struct Seen {
  int scored = 0;
  int picked = 0;
  RemoteTokens tokens = RemoteTokens::kNone;
  std::vector<uint32_t> token_ids;
  bool dry_run = false;
};

// Scores every candidate alike (the Router's tie-break picks) and records what the request carried.
class SpyStrategy final : public routing::Strategy {
 public:
  SpyStrategy(std::string name, bool wants_tokens, Seen& seen)
      : name_(std::move(name)), wants_tokens_(wants_tokens), seen_(seen) {}
  bool wantsPromptMatch() const override { return wants_tokens_; }
  void score(routing::RoutingInput& input) override {
    ++seen_.scored;
    seen_.tokens = input.request.remote_tokens;
    seen_.token_ids = input.request.remote_token_ids ? *input.request.remote_token_ids : std::vector<uint32_t>{};
    for (auto& c : input.candidates) c.score = 1;
  }
  void onPicked(routing::RoutingInput& input, size_t) override {
    ++seen_.picked;
    seen_.dry_run = input.dry_run;
  }

 private:
  std::string name_;
  bool wants_tokens_;
  Seen& seen_;
};

// The sum of every sample of `name` (all its label sets) in Prometheus text.
double sumOf(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name, 0) != 0 || (line[name.size()] != '{' && line[name.size()] != ' ')) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

constexpr const char* kChat = R"({"model":"m","messages":[{"role":"user","content":"hello"}]})";

class RequestPreparationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.routing.strategy = "plain";
    pods_.update({testing::podSpec("a", 1), testing::podSpec("b", 2)});
    for (const auto& p : pods_.snapshot()->pods()) p->recordHealth(true, 1, 1);
    routing::StrategyRegistry registry;
    registry.add("plain", [this](const routing::StrategyDeps&) {
      return std::make_unique<SpyStrategy>("plain", false, plain_);
    });
    registry.add("hashing", [this](const routing::StrategyDeps&) {
      return std::make_unique<SpyStrategy>("hashing", true, hashing_);
    });
    router_ = std::make_unique<routing::Router>(registry, routing::StrategyDeps{config_}, pods_, [] { return 1000; });
  }

  // Builds the preparation, with `keys_yaml` as the API keys file when given.
  void start(const std::string& keys_yaml = "") {
    config::AuthConfig auth;
    if (!keys_yaml.empty()) {
      // One file per test and process: ctest runs the cases as parallel processes, and a file another case is
      // rewriting meanwhile would not load.
      auth.api_keys_file = ::testing::TempDir() + "prefixgate-request-preparation-keys-" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
                           std::to_string(::getpid()) + ".yaml";
      std::ofstream(auth.api_keys_file) << keys_yaml;
    }
    credentials_ = std::make_unique<auth::Credentials>(auth, [] { return int64_t{1000}; });
    std::vector<std::string> problems;
    ASSERT_TRUE(credentials_->load(problems)) << problems.front();
    preparation_ = std::make_unique<RequestPreparation>(RequestPreparation::Deps{
        .config = config_,
        .router = *router_,
        .pods = pods_,
        .credentials = *credentials_,
        .api_key_metrics = api_key_metrics_,
        .metrics = metrics_,
        .prefix_metrics = prefix_metrics_,
        .active_requests = active_requests_,
        .tokenizer = &tokenizer_,
    });
  }

  // A client request with API key `key` ("" = none), its key authenticated on the head as the session does.
  std::unique_ptr<ClientAuth> authenticated(const std::string& key) {
    auto auth = std::make_unique<ClientAuth>(*credentials_, api_key_metrics_);
    proxy::ClientHead head;
    if (!key.empty()) head.set("authorization", "Bearer " + key);
    EXPECT_FALSE(auth->authenticate(head)) << "key " << key << " refused";
    return auth;
  }

  // Runs prepare() to completion for `body` (its strategy header `strategy`).
  void prepare(PreparedRequest& out, std::string body = kChat, std::string_view strategy = "",
               ClientAuth* auth = nullptr, bool dry_run = false) {
    bodies_.push_back(std::make_unique<std::string>(std::move(body)));
    RequestToPrepare in{.endpoint = openai::Endpoint::kChatCompletions,
                        .body = *bodies_.back(),
                        .headers = RouteHeaders{strategy, {}, {}},
                        .rng = rng_,
                        .auth = auth,
                        .dry_run = dry_run};
    asio::io_context io;
    bool done = false;
    asio::co_spawn(io, preparation_->prepare(in, out), [&](std::exception_ptr e) {
      if (e) std::rethrow_exception(e);
      done = true;
    });
    io.run();
    ASSERT_TRUE(done);
  }

  std::string metricsText() { return metrics_.serialize(*pods_.snapshot(), 1000); }
  int64_t inFlight() const {
    return pods_.snapshot()->find("a")->signals().inFlight() + pods_.snapshot()->find("b")->signals().inFlight();
  }

  config::Config config_;
  discovery::PodRegistry pods_;
  Seen plain_, hashing_;
  std::unique_ptr<routing::Router> router_;
  metrics::GatewayMetrics metrics_;
  metrics::ApiKeyMetrics api_key_metrics_{metrics_.registry()};
  routing::PrefixMetrics prefix_metrics_{metrics_.registry()};
  std::atomic<int64_t> active_requests_{1};  // the request being prepared (RequestOutcome counts it)
  FakeTokenizer tokenizer_;
  std::unique_ptr<auth::Credentials> credentials_;
  std::unique_ptr<RequestPreparation> preparation_;
  std::vector<std::unique_ptr<std::string>> bodies_;  // each request's body outlives its PreparedRequest
  std::mt19937_64 rng_{7};
};

// A key refused on the head (401), or outside its models once the model is known (403), stops the request before
// the tokenizer is asked or a pod chosen.
TEST_F(RequestPreparationTest, RefusedKeyIsNeitherTokenizedNorRouted) {
  start("keys:\n  - {name: alice, key: sk-alice, models: [other]}\n");
  ClientAuth stranger = preparation_->clientAuth();
  proxy::ClientHead head;
  head.set("authorization", "Bearer sk-nobody");
  const std::optional<auth::Refusal> unknown = stranger.authenticate(head);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->error, GatewayError::kUnauthorized);

  auto alice = authenticated("sk-alice");
  PreparedRequest prepared;
  prepare(prepared, kChat, "hashing", alice.get());
  ASSERT_TRUE(prepared.refusal);
  EXPECT_EQ(prepared.refusal->error, GatewayError::kForbidden);
  EXPECT_EQ(prepared.request.model, "m");  // parsed: the log line names the model
  EXPECT_EQ(tokenizer_.calls, 0);
  EXPECT_EQ(hashing_.scored, 0);
  EXPECT_FALSE(prepared.decision.pod);
  EXPECT_EQ(inFlight(), 0);
}

// Over its requests per minute, a key's request is refused with the OpenAI-shaped 429 and the seconds until its
// window frees up, before tokenizing or routing; the refusal is counted under the key.
TEST_F(RequestPreparationTest, OverQuotaIsRefusedWithOpenAiShaped429) {
  start("keys:\n  - {name: bob, key: sk-bob, requests_per_minute: 1}\n");
  auto bob = authenticated("sk-bob");
  {
    PreparedRequest first;
    prepare(first, kChat, "hashing", bob.get());
    ASSERT_FALSE(first.refusal) << first.refusal->message;
    EXPECT_TRUE(first.decision.pod);
  }
  PreparedRequest second;
  prepare(second, kChat, "hashing", bob.get());
  ASSERT_TRUE(second.refusal);
  EXPECT_EQ(second.refusal->error, GatewayError::kRateLimited);
  EXPECT_GT(second.refusal->retry_after_s, 0u);
  const auto body = nlohmann::json::parse(
      openai::errorBody(second.refusal->error, second.refusal->message, second.refusal->param));
  EXPECT_EQ(openai::errorInfo(second.refusal->error).status, 429);
  EXPECT_EQ(body["error"]["type"], "rate_limit_error");
  EXPECT_EQ(body["error"]["code"], 429);
  EXPECT_FALSE(body["error"]["message"].get<std::string>().empty());
  EXPECT_EQ(tokenizer_.calls, 1);  // the first request's only
  EXPECT_EQ(hashing_.scored, 1);
  EXPECT_EQ(sumOf(metricsText(), "prefixgate_api_key_rate_limited_total"), 1);
}

// A strategy that hashes prompts scores the remote tokenizer's answer: the tokenizer is asked before choose().
TEST_F(RequestPreparationTest, StrategyWantingTokensGetsTheTokenizersAnswerBeforeChoose) {
  start();
  PreparedRequest prepared;
  prepare(prepared, kChat, "hashing");
  ASSERT_FALSE(prepared.refusal) << prepared.refusal->message;
  EXPECT_EQ(tokenizer_.calls, 1);
  EXPECT_EQ(hashing_.scored, 1);
  EXPECT_EQ(hashing_.tokens, RemoteTokens::kOk);
  EXPECT_EQ(hashing_.token_ids, (std::vector<uint32_t>{7, 8, 9}));
  EXPECT_EQ(prepared.tokens.outcome, "miss");
  EXPECT_EQ(tokensSource(prepared.request), "remote");
  EXPECT_EQ(prepared.decision.strategy, "hashing");
  EXPECT_EQ(inFlight(), 1);  // counted against the pick until the decision ends
  EXPECT_EQ(sumOf(metricsText(), "prefixgate_remote_tokenizer_requests_total"), 1);
}

// A strategy that hashes no prompt never costs a tokenize call.
TEST_F(RequestPreparationTest, StrategyNotWantingTokensNeverAsksTheTokenizer) {
  start();
  PreparedRequest prepared;
  prepare(prepared);
  ASSERT_FALSE(prepared.refusal) << prepared.refusal->message;
  EXPECT_EQ(tokenizer_.calls, 0);
  EXPECT_EQ(plain_.scored, 1);
  EXPECT_EQ(plain_.tokens, RemoteTokens::kNone);
  EXPECT_EQ(prepared.tokens.outcome, "");
  EXPECT_EQ(tokensSource(prepared.request), "local");
  EXPECT_EQ(sumOf(metricsText(), "prefixgate_remote_tokenizer_requests_total"), 0);
}

// A tokenizer that fails leaves the request marked: the strategy routes it by load alone, and the failure is counted.
TEST_F(RequestPreparationTest, FailedTokenizingRoutesByLoadAndCountsTheFailure) {
  start();
  tokenizer_.outcome = tokenize::TokenizeOutcome::kTimeout;
  PreparedRequest prepared;
  prepare(prepared, kChat, "hashing");
  ASSERT_FALSE(prepared.refusal) << prepared.refusal->message;
  EXPECT_EQ(hashing_.tokens, RemoteTokens::kFailed);
  EXPECT_EQ(prepared.tokens.outcome, "timeout");
  const std::string text = metricsText();
  EXPECT_EQ(sumOf(text, "prefixgate_remote_tokenizer_requests_total"), 1);
  EXPECT_EQ(sumOf(text, "aibrix_prefix_cache_routing_errors_total"), 1);
}

// /debug/route's dry run decides with the same tokens but records nothing: no key allowance taken, no in-flight
// count, no tokenizer series (not even a failure), the strategy told it is a dry run; the in-flight bound is not
// applied to it.
TEST_F(RequestPreparationTest, DryRunRecordsNothing) {
  config_.limits.max_in_flight = 1;
  active_requests_ = 5;
  start("keys:\n  - {name: bob, key: sk-bob, requests_per_minute: 1}\n");
  tokenizer_.outcome = tokenize::TokenizeOutcome::kError;
  auto bob = authenticated("sk-bob");
  for (int i = 0; i < 2; ++i) {
    PreparedRequest dry;
    prepare(dry, kChat, "hashing", bob.get(), true);
    ASSERT_FALSE(dry.refusal) << dry.refusal->message;
    EXPECT_TRUE(dry.decision.pod);
    EXPECT_EQ(inFlight(), 0);
    EXPECT_TRUE(hashing_.dry_run);
    EXPECT_EQ(dry.tokens.outcome, "error");  // asked, as a real request would be, for the same decision
  }
  const std::string text = metricsText();
  EXPECT_EQ(sumOf(text, "prefixgate_remote_tokenizer_requests_total"), 0);
  EXPECT_EQ(sumOf(text, "prefixgate_remote_tokenizer_seconds_count"), 0);
  EXPECT_EQ(sumOf(text, "aibrix_prefix_cache_routing_errors_total"), 0);
  EXPECT_EQ(sumOf(text, "prefixgate_api_key_rate_limited_total"), 0);
  active_requests_ = 1;
  PreparedRequest real;  // bob's one request a minute is still his
  prepare(real, kChat, "hashing", bob.get());
  EXPECT_FALSE(real.refusal) << real.refusal->message;
  EXPECT_FALSE(hashing_.dry_run);
}

// A model no pod serves is refused (404) without a tokenize call: a made-up name never reaches an engine or adds
// a series.
TEST_F(RequestPreparationTest, UnknownModelIsRefusedWithoutCallingTheTokenizer) {
  start();
  PreparedRequest prepared;
  prepare(prepared, R"({"model":"made-up","messages":[{"role":"user","content":"hi"}]})", "hashing");
  ASSERT_TRUE(prepared.refusal);
  EXPECT_EQ(prepared.refusal->error, GatewayError::kModelNotServed);
  EXPECT_NE(prepared.refusal->message.find("made-up"), std::string::npos);
  EXPECT_EQ(tokenizer_.calls, 0);
  EXPECT_EQ(hashing_.scored, 0);
  EXPECT_EQ(sumOf(metricsText(), "aibrix_prefix_cache_routing_errors_total"), 0);
}

// A body that does not parse is refused (400, naming the field) before the key's allowance is touched.
TEST_F(RequestPreparationTest, InvalidBodyIsRefusedBeforeAnythingElse) {
  start("keys:\n  - {name: bob, key: sk-bob, requests_per_minute: 1}\n");
  auto bob = authenticated("sk-bob");
  PreparedRequest bad;
  prepare(bad, R"({"messages":[{"role":"user","content":"hi"}]})", "hashing", bob.get());
  ASSERT_TRUE(bad.refusal);
  EXPECT_EQ(bad.refusal->error, GatewayError::kInvalidRequest);
  EXPECT_EQ(bad.refusal->param, "model");
  EXPECT_EQ(tokenizer_.calls, 0);
  PreparedRequest good;
  prepare(good, kChat, "hashing", bob.get());
  EXPECT_FALSE(good.refusal) << good.refusal->message;
}

// Past limits.max_in_flight the gateway answers 429 (overloaded) without routing.
TEST_F(RequestPreparationTest, InFlightBoundRefusesBeforeRouting) {
  config_.limits.max_in_flight = 2;
  active_requests_ = 3;
  start();
  PreparedRequest prepared;
  prepare(prepared, kChat, "hashing");
  ASSERT_TRUE(prepared.refusal);
  EXPECT_EQ(prepared.refusal->error, GatewayError::kOverloaded);
  EXPECT_EQ(tokenizer_.calls, 0);
  EXPECT_EQ(hashing_.scored, 0);
}

// The relay's failover chooses again with the request's own strategy, leaving out the pods it tried.
TEST_F(RequestPreparationTest, ChooseAgainKeepsTheStrategyAndLeavesOutTriedPods) {
  start();
  PreparedRequest prepared;
  prepare(prepared, kChat, "hashing");
  ASSERT_TRUE(prepared.decision.pod);
  const PodId tried[] = {prepared.decision.pod->id()};
  routing::Decision again = preparation_->chooseAgain(prepared, prepared.decision, tried, rng_);
  ASSERT_EQ(again.failure, routing::RouteFailure::kNone) << again.message;
  EXPECT_NE(again.pod->id().value, tried[0].value);
  EXPECT_EQ(again.strategy, "hashing");
  EXPECT_EQ(hashing_.scored, 2);
  EXPECT_EQ(tokenizer_.calls, 1);  // the tokens are the request's: not asked again
}

}  // namespace
}  // namespace prefixgate::server
