// The remote tokenizer: the /tokenize body built from the request's raw JSON, the strict answer parser, the pod
// order, the LRU cache, and the client end to end against fake engines on loopback (vLLM, llama.cpp's two exchanges,
// SGLang). The protocol per dialect without sockets: tests/unit/tokenize/tokenize_protocol_dialects_test.cpp.
#include "tokenize/remote_tokenizer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/config.h"
#include "openai/request.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/router.h"
#include "unit/core/fake_tokenize_engine.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::tokenize {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// The TokenizeInput of a body as the gateway parses it.
TokenizeInput inputOf(openai::Endpoint endpoint, std::string& body, openai::RequestView& view) {
  auto err = openai::parseRequest(endpoint, body, true, config::LimitsConfig{}.max_json_depth, view);
  EXPECT_FALSE(err) << err.message;
  const bool chat = endpoint == openai::Endpoint::kChatCompletions;
  return {view.model, chat, view.raw_messages, view.raw_tools, view.raw_prompt};
}

// ---- the request's raw JSON and the /tokenize body ----

// Ensures a chat request with tools becomes vLLM's chat form, with messages and tools byte for byte as sent
// (spacing and escapes kept), the generation prompt on and special tokens off.
TEST(TokenizeBody, ChatWithToolsKeepsTheRawJson) {
  const std::string messages = R"([ {"role": "system", "content": "Be \"brief\"\n"},
    {"role":"user","content":[{"type":"text","text":"hi \u00e9"}]} ])";
  const std::string tools = R"([{"type":"function", "function":{"name":"f","parameters":{}}}])";
  std::string body = R"({"model": "m\"x", "stream": true, "messages" : )" + messages + R"(  , "tools": )" + tools +
                     R"(, "max_tokens": 3})";
  openai::RequestView view;
  TokenizeInput input = inputOf(openai::Endpoint::kChatCompletions, body, view);
  EXPECT_EQ(view.raw_messages, messages);
  EXPECT_EQ(view.raw_tools, tools);
  const std::string built = buildTokenizeBody(input);
  EXPECT_NE(built.find(messages), std::string::npos) << built;
  EXPECT_NE(built.find(tools), std::string::npos) << built;
  json doc = json::parse(built);
  EXPECT_EQ(doc["model"], "m\"x");
  EXPECT_EQ(doc["messages"], json::parse(messages));
  EXPECT_EQ(doc["tools"], json::parse(tools));
  EXPECT_EQ(doc["add_generation_prompt"], true);
  EXPECT_EQ(doc["add_special_tokens"], false);
  EXPECT_EQ(doc.size(), 5u);
}

// Ensures a chat request without tools (absent or null) sends no "tools", and tools reach the engine even when
// include_tools keeps them out of the local prompt text (the engine templates them either way).
TEST(TokenizeBody, ChatWithoutTools) {
  for (std::string body : {std::string(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"),
                           std::string(R"({"model":"m","tools":null,"messages":[{"role":"user","content":"x"}]})")}) {
    openai::RequestView view;
    TokenizeInput input = inputOf(openai::Endpoint::kChatCompletions, body, view);
    EXPECT_TRUE(view.raw_tools.empty());
    json doc = json::parse(buildTokenizeBody(input));
    EXPECT_FALSE(doc.contains("tools"));
    EXPECT_EQ(doc["messages"], json::parse(R"([{"role":"user","content":"x"}])"));
  }
  std::string body = R"({"model":"m","tools":[1],"messages":[{"role":"user","content":"x"}]})";
  openai::RequestView view;
  ASSERT_FALSE(openai::parseRequest(openai::Endpoint::kChatCompletions, body, false,
                                    config::LimitsConfig{}.max_json_depth, view));
  EXPECT_EQ(view.prompt_text, "x");
  EXPECT_EQ(view.raw_tools, "[1]");
}

// Ensures completions send the prompt as written (a string with escapes, or a list of strings) in the completion
// form with special tokens on; embeddings send their input.
TEST(TokenizeBody, CompletionForms) {
  struct Case {
    openai::Endpoint endpoint;
    std::string body;
    std::string raw;
  } cases[] = {
      {openai::Endpoint::kCompletions, R"({"model":"m","prompt":  "a\"b\nc"  ,"max_tokens":1})", R"("a\"b\nc")"},
      {openai::Endpoint::kCompletions, R"({"prompt":["ab", "cd"] ,"model":"m"})", R"(["ab", "cd"])"},
      {openai::Endpoint::kEmbeddings, R"({"model":"m","input":"hello"})", R"("hello")"},
  };
  for (auto& c : cases) {
    openai::RequestView view;
    TokenizeInput input = inputOf(c.endpoint, c.body, view);
    EXPECT_EQ(view.raw_prompt, c.raw);
    const std::string built = buildTokenizeBody(input);
    EXPECT_EQ(built, R"({"model":"m","prompt":)" + c.raw + R"(,"add_special_tokens":true})");
    EXPECT_NO_THROW(json::parse(built));
  }
}

// Ensures the cache key changes with the model, the form and any field, and text moved across the
// messages/tools boundary does not collide.
TEST(TokenizeBody, CacheKeySeparatesFields) {
  TokenizeInput base{"m", true, R"([{"content":"ab"}])", R"([1])", ""};
  const uint64_t key = tokenizeCacheKey(base);
  EXPECT_EQ(key, tokenizeCacheKey(base));
  TokenizeInput other = base;
  other.model = "n";
  EXPECT_NE(key, tokenizeCacheKey(other));
  other = base;
  other.tools = "";
  EXPECT_NE(key, tokenizeCacheKey(other));
  TokenizeInput a{"m", true, "ab", "c", ""}, b{"m", true, "a", "bc", ""};
  EXPECT_NE(tokenizeCacheKey(a), tokenizeCacheKey(b));
  TokenizeInput chat{"m", true, "x", "", ""}, completion{"m", false, "", "", "x"};
  EXPECT_NE(tokenizeCacheKey(chat), tokenizeCacheKey(completion));
}

// ---- the answer ----

// Ensures a well-formed answer gives its ids and max_model_len, in any key order, with unknown fields skipped.
TEST(TokenizeAnswer, ParsesTheAnswer) {
  TokenizeAnswer out;
  std::string error;
  ASSERT_TRUE(parseTokenizeAnswer(R"({"count": 3, "max_model_len": 8192, "tokens": [0, 17, 4294967295]})", out, error))
      << error;
  EXPECT_EQ(out.tokens, (std::vector<uint32_t>{0, 17, 4294967295u}));
  EXPECT_EQ(out.max_model_len, 8192u);
  ASSERT_TRUE(parseTokenizeAnswer(
      " {\"tokens\":[5],\"token_strs\":[\"a\\\"\",null],\"extra\":{\"k\":[1.5e3,-2,true,false]},\"count\":1}\n", out,
      error))
      << error;
  EXPECT_EQ(out.tokens, (std::vector<uint32_t>{5}));
  EXPECT_EQ(out.max_model_len, 0u);
  ASSERT_TRUE(parseTokenizeAnswer(R"({"count":0,"tokens":[]})", out, error)) << error;
  EXPECT_TRUE(out.tokens.empty());
}

// Ensures every malformed answer is rejected with a reason: not JSON or not an object, trailing bytes, missing or
// repeated fields, count mismatches, and ids or counts that are not whole numbers from 0 to 4294967295.
TEST(TokenizeAnswer, RejectsMalformedAnswers) {
  const char* bad[] = {
      "",
      "[1,2]",
      "null",
      R"({"count":1,"tokens":[1])",
      R"({"count":1,"tokens":[1]} x)",
      R"({"count":1,"tokens":[1]}{})",
      R"({"count":1})",
      R"({"tokens":[1]})",
      R"({"count":2,"tokens":[1]})",
      R"({"count":0,"tokens":[1]})",
      R"({"count":1,"count":1,"tokens":[1]})",
      R"({"count":1,"tokens":[1],"tokens":[1]})",
      R"({"count":1,"max_model_len":1,"max_model_len":2,"tokens":[1]})",
      R"({"count":1,"tokens":[-1]})",
      R"({"count":1,"tokens":[1.0]})",
      R"({"count":1,"tokens":[1e3]})",
      R"({"count":1,"tokens":[4294967296]})",
      R"({"count":1,"tokens":[99999999999999999999999]})",
      R"({"count":1,"tokens":[01]})",
      R"({"count":1,"tokens":["1"]})",
      R"({"count":1,"tokens":[null]})",
      R"({"count":1,"tokens":[[1]]})",
      R"({"count":2,"tokens":[1,]})",
      R"({"count":1,"tokens":[1 2]})",
      R"({"count":1,"tokens":1})",
      R"({"count":1,"tokens":null})",
      R"({"count":-1,"tokens":[]})",
      R"({"count":1.5,"tokens":[1]})",
      R"({"count":"1","tokens":[1]})",
      R"({"count":1,"max_model_len":-5,"tokens":[1]})",
      R"({"count":1,"max_model_len":"8k","tokens":[1]})",
      R"({"count":1,"tokens":[1],"x":})",
      R"({"count":1,"tokens":[1],"x":"unterminated})",
      R"({"count":1 "tokens":[1]})",
      R"({count:1,"tokens":[1]})",
  };
  for (const char* body : bad) {
    TokenizeAnswer out;
    std::string error;
    EXPECT_FALSE(parseTokenizeAnswer(body, out, error)) << body;
    EXPECT_FALSE(error.empty()) << body;
  }
  TokenizeAnswer out;
  std::string error;
  EXPECT_FALSE(parseTokenizeAnswer(R"({"count":2,"tokens":[1]})", out, error));
  EXPECT_NE(error.find("count"), std::string::npos) << error;
}

// ---- the pod order ----

std::vector<TokenizerPod> podsWithLoads(std::vector<int32_t> loads) {
  std::vector<TokenizerPod> pods;
  for (size_t i = 0; i < loads.size(); ++i)
    pods.push_back({static_cast<uint32_t>(i + 1), "p" + std::to_string(i), "127.0.0.1", 1, loads[i]});
  return pods;
}

std::vector<uint32_t> idsOf(const std::vector<TokenizerPod>& pods) {
  std::vector<uint32_t> out;
  for (const auto& p : pods) out.push_back(p.id);
  return out;
}

// Ensures the least-loaded pod comes first (the next least loaded is the retry), and successive calls rotate
// among equally loaded pods so that no one pod takes every tokenize call.
TEST(TokenizerPods, LeastLoadedFirstTiesRotate) {
  auto pods = podsWithLoads({5, 1, 3});
  orderTokenizerPods(pods, 7);
  EXPECT_EQ(idsOf(pods), (std::vector<uint32_t>{2, 3, 1}));
  std::map<uint32_t, int> firsts;
  for (uint64_t rotation = 0; rotation < 30; ++rotation) {
    auto tied = podsWithLoads({0, 4, 0, 0});
    orderTokenizerPods(tied, rotation);
    ++firsts[tied[0].id];
    EXPECT_EQ(tied[0].load, 0);
    EXPECT_EQ(tied[1].load, 0);
    EXPECT_EQ(tied[3].load, 4);
  }
  EXPECT_EQ(firsts, (std::map<uint32_t, int>{{1, 10}, {3, 10}, {4, 10}}));
  std::vector<TokenizerPod> none;
  orderTokenizerPods(none, 3);
  EXPECT_TRUE(none.empty());
}

// ---- the cache ----

TokenCache::Tokens tokens(std::initializer_list<uint32_t> ids) {
  return std::make_shared<const std::vector<uint32_t>>(ids);
}

// Ensures a cached answer is found again (the same shared list), and an absent key is a miss.
TEST(TokenCache, HitAndMiss) {
  TokenCache cache(10);
  EXPECT_EQ(cache.find(1), nullptr);
  auto t = tokens({1, 2, 3});
  cache.insert(1, t);
  EXPECT_EQ(cache.find(1), t);
  EXPECT_EQ(cache.find(2), nullptr);
  cache.insert(1, tokens({9}));
  EXPECT_EQ(*cache.find(1), (std::vector<uint32_t>{9}));
  EXPECT_EQ(cache.size(), 1u);
}

// Ensures the least recently used entry goes first, and a lookup makes an entry recent again.
TEST(TokenCache, EvictsLeastRecentlyUsed) {
  TokenCache cache(3, 1);
  cache.insert(1, tokens({1}));
  cache.insert(2, tokens({2}));
  cache.insert(3, tokens({3}));
  ASSERT_NE(cache.find(1), nullptr);  // 2 is now the oldest
  cache.insert(4, tokens({4}));
  EXPECT_EQ(cache.find(2), nullptr);
  EXPECT_NE(cache.find(1), nullptr);
  EXPECT_NE(cache.find(3), nullptr);
  EXPECT_NE(cache.find(4), nullptr);
  cache.insert(5, tokens({5}));  // 1 is now the oldest
  EXPECT_EQ(cache.find(1), nullptr);
  EXPECT_EQ(cache.size(), 3u);
}

// Ensures the whole cache never holds more than its bound, whatever the shard count asked.
TEST(TokenCache, BoundedByEntries) {
  for (size_t bound : {1u, 3u, 17u, 1000u}) {
    TokenCache cache(bound, 16);
    for (uint64_t k = 0; k < 5000; ++k) cache.insert(k * 0x9E3779B97F4A7C15ULL, tokens({1}));
    EXPECT_LE(cache.size(), bound);
    EXPECT_GE(cache.size(), bound / 2) << "shards should split the bound, not waste it";
    EXPECT_EQ(cache.capacity(), bound);
  }
}

// Ensures two threads inserting and looking up at once keep the cache consistent and bounded (run under
// AddressSanitizer by scripts/test.sh), and measures what a hit costs.
TEST(TokenCache, ConcurrentThreadsAndHitCost) {
  TokenCache cache(512);
  std::atomic<bool> go{false};
  auto work = [&](uint64_t seed) {
    while (!go.load()) std::this_thread::yield();
    for (uint64_t i = 0; i < 50000; ++i) {
      const uint64_t key = ((i * 7 + seed) % 1024) * 0x9E3779B97F4A7C15ULL;
      if (auto hit = cache.find(key)) {
        ASSERT_EQ(hit->size(), 1u);
        ASSERT_EQ((*hit)[0], static_cast<uint32_t>(key >> 32));
      } else {
        cache.insert(key, tokens({static_cast<uint32_t>(key >> 32)}));
      }
    }
  };
  std::thread a(work, 1), b(work, 2);
  go = true;
  a.join();
  b.join();
  EXPECT_LE(cache.size(), 512u);

  cache.insert(42, std::make_shared<const std::vector<uint32_t>>(4000, 7));
  constexpr int kLookups = 200000;
  const auto start = Clock::now();
  size_t found = 0;
  for (int i = 0; i < kLookups; ++i) found += cache.find(42) != nullptr;
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kLookups;
  EXPECT_EQ(found, static_cast<size_t>(kLookups));
  std::printf("[ measured ] TokenCache hit: %.0f ns\n", ns);
  RecordProperty("hit_ns", static_cast<int>(ns));
  EXPECT_LT(ns, 20000) << "a hit should cost about a microsecond";

  // What a request pays on a hit: the key of its raw JSON (here a 16 KiB conversation) and the lookup.
  const std::string messages = "[" + std::string(16 * 1024, 'x') + "]";
  const TokenizeInput input{"model", true, messages, "", ""};
  cache.insert(tokenizeCacheKey(input), tokens({1}));
  const auto keyed_start = Clock::now();
  for (int i = 0; i < kLookups / 10; ++i) found += cache.find(tokenizeCacheKey(input)) != nullptr;
  const double keyed_ns =
      std::chrono::duration<double, std::nano>(Clock::now() - keyed_start).count() / (kLookups / 10);
  std::printf("[ measured ] key of a 16 KiB prompt + hit: %.0f ns\n", keyed_ns);
  EXPECT_EQ(found, static_cast<size_t>(kLookups + kLookups / 10));
}

// ---- the client against a fake engine ----

using fakes::FakeEngine;
using fakes::TestPool;

class RemoteTokenizerTest : public ::testing::Test {
 protected:
  RemoteTokenizer make(std::chrono::milliseconds timeout = std::chrono::milliseconds(500),
                       size_t max_answer_bytes = RemoteTokenizerOptions{}.max_answer_bytes) {
    RemoteTokenizerOptions options;
    options.timeout = timeout;
    options.max_answer_bytes = max_answer_bytes;
    options.cache_entries = 100;
    return RemoteTokenizer(options, [this](std::string_view model, std::vector<TokenizerPod>& out) {
      if (model == "m") out = pods;
    });
  }
  TokenizeResult run(RemoteTokenizer& tokenizer, const TokenizeInput& input, ConnectionPool* pool) {
    return fakes::runTokenize(io_, tokenizer, input, pool);
  }
  uint16_t closedPort() { return fakes::closedPort(io_); }
  asio::io_context io_;
  std::vector<TokenizerPod> pods;
  TokenizeInput chat_{"m", true, R"([{"role":"user","content":"hello"}])", "", ""};
};

// Ensures a miss sends the built body to the engine, returns its ids and caches them: the same input again is a
// hit that reaches no engine; the connection is pooled and reused for the next miss.
TEST_F(RemoteTokenizerTest, MissThenHitOnPooledConnection) {
  FakeEngine engine(io_);
  pods = {engine.pod(1)};
  RemoteTokenizer tokenizer = make();
  TestPool pool;
  TokenizeResult first = run(tokenizer, chat_, &pool);
  ASSERT_EQ(first.outcome, TokenizeOutcome::kMiss) << first.error;
  EXPECT_EQ(*first.tokens, (std::vector<uint32_t>{11, 22, 33}));
  EXPECT_EQ(first.pod, "fake-1");
  ASSERT_EQ(engine.bodies.size(), 1u);
  EXPECT_EQ(engine.bodies[0], buildTokenizeBody(chat_));
  TokenizeResult again = run(tokenizer, chat_, &pool);
  EXPECT_EQ(again.outcome, TokenizeOutcome::kHit);
  EXPECT_EQ(again.tokens, first.tokens);
  EXPECT_EQ(engine.bodies.size(), 1u);
  TokenizeInput other = chat_;
  other.messages = R"([{"role":"user","content":"bye"}])";
  EXPECT_EQ(run(tokenizer, other, &pool).outcome, TokenizeOutcome::kMiss);
  EXPECT_EQ(engine.connections, 1);
}

// Ensures a pooled connection the engine closed while idle is retried once on a fresh one, to the same pod.
TEST_F(RemoteTokenizerTest, StalePooledConnectionIsRetriedFresh) {
  FakeEngine engine(io_);
  engine.close_after_answer = true;
  pods = {engine.pod(1)};
  RemoteTokenizer tokenizer = make();
  TestPool pool;
  ASSERT_EQ(run(tokenizer, chat_, &pool).outcome, TokenizeOutcome::kMiss);
  ASSERT_EQ(pool.idle[1].size(), 1u);
  TokenizeInput other = chat_;
  other.messages = R"([{"role":"user","content":"again"}])";
  TokenizeResult result = run(tokenizer, other, &pool);
  EXPECT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(engine.connections, 2);
  EXPECT_EQ(engine.bodies.size(), 2u);
}

// Ensures a pod that refuses the connection is followed by one retry on the next pod.
TEST_F(RemoteTokenizerTest, ConnectionFailureRetriesAnotherPod) {
  FakeEngine engine(io_);
  pods = {TokenizerPod{9, "dead", "127.0.0.1", closedPort(), 0}, engine.pod(2, 3)};
  RemoteTokenizer tokenizer = make();
  TokenizeResult result = run(tokenizer, chat_, nullptr);
  EXPECT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(result.pod, "fake-2");
  EXPECT_EQ(engine.bodies.size(), 1u);
}

// Ensures an error status and an answer that does not parse are errors, not retried elsewhere, and not cached.
TEST_F(RemoteTokenizerTest, ErrorStatusAndBadAnswerFail) {
  FakeEngine first(io_), second(io_);
  pods = {first.pod(1, 0), second.pod(2, 5)};
  RemoteTokenizer tokenizer = make();
  first.status = 500;
  TokenizeResult failed = run(tokenizer, chat_, nullptr);
  EXPECT_EQ(failed.outcome, TokenizeOutcome::kError);
  EXPECT_FALSE(failed.ok());
  EXPECT_NE(failed.error.find("500"), std::string::npos) << failed.error;
  EXPECT_TRUE(second.bodies.empty());
  first.status = 200;
  first.answer = R"({"count":4,"tokens":[1,2,3]})";
  TokenizeResult bad = run(tokenizer, chat_, nullptr);
  EXPECT_EQ(bad.outcome, TokenizeOutcome::kError);
  EXPECT_NE(bad.error.find("count"), std::string::npos) << bad.error;
  EXPECT_EQ(tokenizer.cache().size(), 0u);
}

// Ensures a slow engine makes the call end as a timeout within about the timeout, and no pod is a failure too.
TEST_F(RemoteTokenizerTest, TimeoutAndNoPod) {
  FakeEngine engine(io_);
  engine.delay = std::chrono::milliseconds(2000);
  pods = {engine.pod(1)};
  RemoteTokenizer tokenizer = make(std::chrono::milliseconds(100));
  const auto start = Clock::now();
  TokenizeResult slow = run(tokenizer, chat_, nullptr);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  EXPECT_EQ(slow.outcome, TokenizeOutcome::kTimeout) << slow.error;
  EXPECT_GE(took.count(), 90);
  EXPECT_LT(took.count(), 1000);
  TokenizeInput unknown = chat_;
  unknown.model = "other";
  EXPECT_EQ(run(tokenizer, unknown, nullptr).outcome, TokenizeOutcome::kNoPod);
  EXPECT_EQ(outcomeLabel(TokenizeOutcome::kNoPod), "no_pod");
}

// ---- the dialects on the wire ----

using engine::EngineKind;

// What a llama.cpp server renders for chat_ and answers for the rendered prompt (no count: llama.cpp sends none).
constexpr std::string_view kRendered = R"({"prompt":"<|user|>\nhello \"q\" caf\u00e9 \ud83d\ude00<|assistant|>\n"})";
constexpr std::string_view kRenderedTokenizeBody =
    R"({"model":"m","content":"<|user|>\nhello \"q\" caf\u00e9 \ud83d\ude00<|assistant|>\n",)"
    R"("add_special":true,"parse_special":true})";

void speakLlamaCpp(FakeEngine& engine) {
  engine.replies["/apply-template"] = {200, std::string(kRendered)};
  engine.replies["/tokenize"] = {200, R"({"tokens":[1,22,333]})"};
}

// Ensures a chat request on a llama.cpp pod is templated by the engine (/apply-template with the request's own
// messages) and the rendered prompt tokenized as the chat endpoint tokenizes it (/tokenize with content,
// add_special, parse_special), both on one connection, pooled or not; the ids are cached like any answer.
TEST_F(RemoteTokenizerTest, LlamaCppChatTemplatesThenTokenizesOnOneConnection) {
  FakeEngine engine(io_);
  speakLlamaCpp(engine);
  pods = {engine.pod(1, 0, EngineKind::kLlamaCpp)};
  RemoteTokenizer tokenizer = make();
  TestPool pool;
  TokenizeResult result = run(tokenizer, chat_, &pool);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(*result.tokens, (std::vector<uint32_t>{1, 22, 333}));
  EXPECT_EQ(result.engine, EngineKind::kLlamaCpp);
  EXPECT_FALSE(result.engine_assumed);
  EXPECT_EQ(engine.targets, (std::vector<std::string>{"/apply-template", "/tokenize"}));
  EXPECT_EQ(engine.bodies[0], R"({"model":"m","messages":[{"role":"user","content":"hello"}]})");
  EXPECT_EQ(engine.bodies[1], kRenderedTokenizeBody);
  EXPECT_EQ(json::parse(engine.bodies[1])["content"], "<|user|>\nhello \"q\" caf\u00e9 \U0001F600<|assistant|>\n");
  EXPECT_EQ(engine.connections, 1);
  EXPECT_EQ(pool.idle[1].size(), 1u);
  EXPECT_EQ(run(tokenizer, chat_, &pool).outcome, TokenizeOutcome::kHit);
  EXPECT_EQ(engine.bodies.size(), 2u);
  // Without a pool: one fresh connection for both exchanges.
  TokenizeInput other = chat_;
  other.messages = R"([{"role":"user","content":"bye"}])";
  EXPECT_EQ(run(tokenizer, other, nullptr).outcome, TokenizeOutcome::kMiss);
  EXPECT_EQ(engine.targets.size(), 4u);
  EXPECT_EQ(engine.connections, 2);
}

// Ensures a completion on a llama.cpp pod is one /tokenize with the client's prompt as content, as sent.
TEST_F(RemoteTokenizerTest, LlamaCppCompletionIsOneTokenize) {
  FakeEngine engine(io_);
  speakLlamaCpp(engine);
  pods = {engine.pod(1, 0, EngineKind::kLlamaCpp)};
  RemoteTokenizer tokenizer = make();
  const TokenizeInput completion{"m", false, "", "", R"("once \"upon\"\n")"};
  TokenizeResult result = run(tokenizer, completion, nullptr);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(engine.targets, (std::vector<std::string>{"/tokenize"}));
  EXPECT_EQ(engine.bodies[0],
            R"({"model":"m","content":"once \"upon\"\n","add_special":true,"parse_special":true})");
}

// Ensures each llama.cpp step's failure names the pod, its dialect and the step (with the engine's reason), stops
// there (no /tokenize after a failed template), and is not cached; an oversized template answer is refused.
TEST_F(RemoteTokenizerTest, LlamaCppFailuresNameTheDialectAndStep) {
  FakeEngine engine(io_);
  speakLlamaCpp(engine);
  pods = {engine.pod(1, 0, EngineKind::kLlamaCpp)};
  RemoteTokenizer tokenizer = make();
  engine.replies["/apply-template"] = {404, R"({"error":{"code":404,"message":"File Not Found"}})"};
  TokenizeResult result = run(tokenizer, chat_, nullptr);
  EXPECT_EQ(result.outcome, TokenizeOutcome::kError);
  EXPECT_NE(result.error.find("pod fake-1 (llamacpp): /apply-template answered 404"), std::string::npos)
      << result.error;
  EXPECT_NE(result.error.find("File Not Found"), std::string::npos) << result.error;
  EXPECT_EQ(engine.targets, (std::vector<std::string>{"/apply-template"}));

  engine.replies["/apply-template"] = {200, R"({"prompt":"\ud800"})"};
  result = run(tokenizer, chat_, nullptr);
  EXPECT_EQ(result.outcome, TokenizeOutcome::kError);
  EXPECT_NE(result.error.find("pod fake-1 (llamacpp): bad /apply-template answer"), std::string::npos)
      << result.error;
  EXPECT_EQ(engine.targets.size(), 2u);

  engine.replies["/apply-template"] = {200, std::string(kRendered)};
  engine.replies["/tokenize"] = {500, ""};
  result = run(tokenizer, chat_, nullptr);
  EXPECT_NE(result.error.find("pod fake-1 (llamacpp): /tokenize answered 500"), std::string::npos) << result.error;
  engine.replies["/tokenize"] = {200, R"({"tokens":[1],"count":2})"};
  result = run(tokenizer, chat_, nullptr);
  EXPECT_NE(result.error.find("pod fake-1 (llamacpp): bad /tokenize answer: 'count'"), std::string::npos)
      << result.error;
  EXPECT_EQ(tokenizer.cache().size(), 0u);

  RemoteTokenizer small = make(std::chrono::milliseconds(500), kRendered.size() - 1);
  result = run(small, chat_, nullptr);
  EXPECT_EQ(result.outcome, TokenizeOutcome::kError);
  EXPECT_NE(result.error.find("the /apply-template answer is larger than"), std::string::npos) << result.error;
}

// Ensures a connection the engine closed after /apply-template is replaced for /tokenize: the second exchange is
// retried once on a fresh connection to the same pod.
TEST_F(RemoteTokenizerTest, LlamaCppConnectionClosedBetweenTheExchanges) {
  FakeEngine engine(io_);
  speakLlamaCpp(engine);
  engine.close_after_answer = true;
  pods = {engine.pod(1, 0, EngineKind::kLlamaCpp)};
  RemoteTokenizer tokenizer = make();
  TestPool pool;
  TokenizeResult result = run(tokenizer, chat_, &pool);
  EXPECT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(engine.targets, (std::vector<std::string>{"/apply-template", "/tokenize"}));
  EXPECT_EQ(engine.connections, 2);
}

// Ensures a chat request on SGLang pods fails as unsupported without a byte sent (SGLang's /tokenize has no chat
// form, and no template is guessed), saying why, while a completion is sent in SGLang's form (vLLM's completion
// body) and its answer (max_model_len -1) accepted.
TEST_F(RemoteTokenizerTest, SglangChatIsUnsupportedAndCompletionsAreAsked) {
  FakeEngine engine(io_);
  engine.answer = R"({"tokens":[7,8],"count":2,"max_model_len":-1})";
  pods = {engine.pod(1, 0, EngineKind::kSglang), engine.pod(2, 1, EngineKind::kSglang)};
  RemoteTokenizer tokenizer = make();
  TokenizeResult chat = run(tokenizer, chat_, nullptr);
  EXPECT_EQ(chat.outcome, TokenizeOutcome::kUnsupported);
  EXPECT_EQ(outcomeLabel(chat.outcome), "unsupported");
  EXPECT_FALSE(chat.ok());
  EXPECT_EQ(chat.engine, EngineKind::kSglang);
  EXPECT_NE(chat.error.find("pod fake-1 (sglang): SGLang's /tokenize has no chat form"), std::string::npos)
      << chat.error;
  EXPECT_EQ(engine.connections, 0);
  EXPECT_TRUE(engine.bodies.empty());

  const TokenizeInput completion{"m", false, "", "", R"("hello")"};
  TokenizeResult result = run(tokenizer, completion, nullptr);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(*result.tokens, (std::vector<uint32_t>{7, 8}));
  EXPECT_EQ(result.engine, EngineKind::kSglang);
  EXPECT_EQ(engine.targets, (std::vector<std::string>{"/tokenize"}));
  EXPECT_EQ(engine.bodies[0], R"({"model":"m","prompt":"hello","add_special_tokens":true})");
  const TokenizeInput list{"m", false, "", "", R"(["a","b"])"};
  EXPECT_EQ(run(tokenizer, list, nullptr).outcome, TokenizeOutcome::kUnsupported);
  EXPECT_EQ(engine.bodies.size(), 1u);
}

// Ensures a fleet mixing engines under one model asks, for a chat request, a pod whose dialect can (vLLM) before a
// less loaded SGLang one, and for a completion simply the least loaded.
TEST_F(RemoteTokenizerTest, MixedFleetAsksAPodThatCan) {
  FakeEngine sglang(io_), vllm(io_);
  pods = {sglang.pod(1, 0, EngineKind::kSglang), vllm.pod(2, 5, EngineKind::kVllm)};
  RemoteTokenizer tokenizer = make();
  TokenizeResult chat = run(tokenizer, chat_, nullptr);
  ASSERT_EQ(chat.outcome, TokenizeOutcome::kMiss) << chat.error;
  EXPECT_EQ(chat.pod, "fake-2");
  EXPECT_EQ(vllm.bodies, (std::vector<std::string>{buildTokenizeBody(chat_)}));
  EXPECT_TRUE(sglang.bodies.empty());
  const TokenizeInput completion{"m", false, "", "", R"("hello")"};
  TokenizeResult result = run(tokenizer, completion, nullptr);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(result.pod, "fake-1");
  EXPECT_EQ(sglang.bodies.size(), 1u);
}

// Ensures the retry after a connection failure speaks the next pod's own dialect (a dead llama.cpp pod, then vLLM).
TEST_F(RemoteTokenizerTest, RetrySpeaksTheNextPodsDialect) {
  FakeEngine vllm(io_);
  pods = {TokenizerPod{9, "dead", "127.0.0.1", closedPort(), 0, EngineKind::kLlamaCpp},
          vllm.pod(2, 3, EngineKind::kVllm)};
  RemoteTokenizer tokenizer = make();
  TokenizeResult result = run(tokenizer, chat_, nullptr);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(result.engine, EngineKind::kVllm);
  EXPECT_EQ(vllm.targets, (std::vector<std::string>{"/tokenize"}));
  EXPECT_EQ(vllm.bodies[0], buildTokenizeBody(chat_));
}

// Ensures a pod whose engine is not recognised yet is spoken to as vLLM, visibly (engine vllm, assumed), a failure
// says so (the empty list llama.cpp gives a vLLM body is an error, not an empty prompt), and a pod of a known
// dialect is asked before it.
TEST_F(RemoteTokenizerTest, UnrecognisedEngineIsSpokenToAsVllm) {
  FakeEngine unknown(io_), llama(io_);
  speakLlamaCpp(llama);
  pods = {unknown.pod(1, 0)};
  RemoteTokenizer tokenizer = make();
  TokenizeResult result = run(tokenizer, chat_, nullptr);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(result.engine, EngineKind::kVllm);
  EXPECT_TRUE(result.engine_assumed);
  EXPECT_EQ(unknown.bodies, (std::vector<std::string>{buildTokenizeBody(chat_)}));

  unknown.answer = R"({"tokens":[]})";
  TokenizeInput other = chat_;
  other.messages = R"([{"role":"user","content":"other"}])";
  result = run(tokenizer, other, nullptr);
  EXPECT_EQ(result.outcome, TokenizeOutcome::kError);
  EXPECT_NE(result.error.find("pod fake-1 (engine not recognised yet, spoken to as vllm): bad /tokenize answer: "
                              "'count' is missing"),
            std::string::npos)
      << result.error;

  pods = {unknown.pod(1, 0), llama.pod(2, 3, EngineKind::kLlamaCpp)};
  result = run(tokenizer, other, nullptr);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(result.pod, "fake-2");
  EXPECT_FALSE(result.engine_assumed);
  EXPECT_EQ(unknown.bodies.size(), 2u);
}

// ---- configuration and the router's question ----

// Ensures the two keys parse, are refused at 0 (naming the file and the key), use_remote_tokenizer is accepted,
// and kv_event_sync turns the remote tokenizer on whatever use_remote_tokenizer says.
TEST(RemoteTokenizerConfig, KeysAndSwitch) {
  config::Problems problems;
  config::Config c = config::parseYaml(R"(
discovery: {file: pods.yaml}
routing:
  prefix_cache: {use_remote_tokenizer: true, remote_tokenizer_timeout_ms: 250, remote_tokenizer_cache_entries: 7}
)", "/etc/pg.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.routing.prefix_cache.remote_tokenizer_timeout_ms, 250u);
  EXPECT_EQ(c.routing.prefix_cache.remote_tokenizer_cache_entries, 7u);
  EXPECT_TRUE(c.routing.prefix_cache.remoteTokenizerOn());
  config::validate(c, {"prefix-cache"}, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();

  config::Config defaults;
  EXPECT_EQ(defaults.routing.prefix_cache.remote_tokenizer_timeout_ms, 500u);
  EXPECT_EQ(defaults.routing.prefix_cache.remote_tokenizer_cache_entries, 10000u);
  EXPECT_FALSE(defaults.routing.prefix_cache.remoteTokenizerOn());
  defaults.routing.prefix_cache.kv_event_sync = true;
  EXPECT_TRUE(defaults.routing.prefix_cache.remoteTokenizerOn());

  c = config::parseYaml(R"(
discovery: {file: pods.yaml}
routing:
  prefix_cache:
    {use_remote_tokenizer: true, block_size: 6, remote_tokenizer_timeout_ms: 0, remote_tokenizer_cache_entries: 0}
)", "/etc/pg.yaml", problems);
  config::validate(c, {"prefix-cache"}, problems);
  auto has = [&](const std::string& line) {
    return std::find(problems.begin(), problems.end(), line) != problems.end();
  };
  EXPECT_TRUE(has("/etc/pg.yaml: routing.prefix_cache.remote_tokenizer_timeout_ms: must be greater than 0"));
  EXPECT_TRUE(has("/etc/pg.yaml: routing.prefix_cache.remote_tokenizer_cache_entries: must be greater than 0"));
  EXPECT_TRUE(std::any_of(problems.begin(), problems.end(), [](const std::string& p) {
    return p.starts_with("/etc/pg.yaml: routing.prefix_cache.block_size: must be a multiple of 4 with the remote");
  }));
}

// Ensures the cache budget, context bound, hedge delay and breaker keys parse with their defaults (the hedge delay
// unset: a quarter of the timeout, applied by the gateway), and a maximum backoff below the first is refused.
TEST(RemoteTokenizerConfig, CacheHedgeAndBreakerKeys) {
  config::Config defaults;
  const auto& d = defaults.routing.prefix_cache;
  EXPECT_EQ(d.remote_tokenizer_cache_mb, 64u);
  EXPECT_EQ(d.remote_tokenizer_max_cached_tokens, 131072u);
  EXPECT_FALSE(d.remote_tokenizer_hedge_delay_ms.has_value());
  EXPECT_EQ(d.remote_tokenizer_breaker_backoff_ms, 1000u);
  EXPECT_EQ(d.remote_tokenizer_breaker_max_backoff_ms, 30000u);
  config::Problems problems;
  config::Config c = config::parseYaml(R"(
discovery: {file: pods.yaml}
routing:
  prefix_cache:
    use_remote_tokenizer: true
    remote_tokenizer_cache_mb: 8
    remote_tokenizer_max_cached_tokens: 32768
    remote_tokenizer_hedge_delay_ms: 0
    remote_tokenizer_breaker_backoff_ms: 500
    remote_tokenizer_breaker_max_backoff_ms: 400
)", "/etc/pg.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.routing.prefix_cache.remote_tokenizer_cache_mb, 8u);
  EXPECT_EQ(c.routing.prefix_cache.remote_tokenizer_max_cached_tokens, 32768u);
  ASSERT_TRUE(c.routing.prefix_cache.remote_tokenizer_hedge_delay_ms.has_value());
  EXPECT_EQ(*c.routing.prefix_cache.remote_tokenizer_hedge_delay_ms, 0u);
  EXPECT_EQ(c.routing.prefix_cache.remote_tokenizer_breaker_backoff_ms, 500u);
  config::validate(c, {"prefix-cache"}, problems);
  EXPECT_EQ(problems, (config::Problems{"/etc/pg.yaml: routing.prefix_cache.remote_tokenizer_breaker_max_backoff_ms: "
                                        "must be at least remote_tokenizer_breaker_backoff_ms"}));
}

// Ensures the router says which strategy a request resolves to before choosing, and that prefix-cache (and only
// it, of the built-in ones here) wants the prompt's tokens.
TEST(RemoteTokenizerRouting, RouterSaysWhetherTheStrategyHashesPrompts) {
  config::Config config;
  config.discovery.file = "p.yaml";
  config.routing.strategy = "prefix-cache";
  index::PrefixIndexOptions options;
  auto services = std::make_unique<routing::PrefixServices>(std::make_unique<CharacterTokenizer>(), 4, 0, options);
  prometheus::Registry registry;
  routing::PrefixMetrics metrics(registry);
  discovery::PodRegistry pods;
  pods.update({testing::podSpec("a", 1)});
  routing::Router router(routing::StrategyRegistry::builtin(), routing::StrategyDeps{config, services.get(), &metrics},
                         pods, [] { return 0; });
  openai::RequestView request;
  request.model = "m";
  routing::RouteQuery by_default{request, "", "", {}, false};
  EXPECT_EQ(router.plan(by_default).name, "prefix-cache");
  EXPECT_TRUE(router.plan(by_default).wantsPromptTokens());
  routing::RouteQuery least{request, "least-request", "", {}, false};
  EXPECT_EQ(router.plan(least).name, "least-request");
  EXPECT_FALSE(router.plan(least).wantsPromptTokens());
  routing::RouteQuery unknown{request, "nope", "", {}, false};
  EXPECT_EQ(router.plan(unknown).name, "");
  EXPECT_FALSE(router.plan(unknown).wantsPromptTokens());
}

}  // namespace
}  // namespace prefixgate::tokenize
