// The remote tokenizer's cache bounds (issue 24): bytes as well as entries, and answers longer than the model
// accepts not cached. Against a fake engine on loopback; the cache alone: tests/unit/tokenize/token_cache_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tokenize/remote_tokenizer.h"
#include "unit/core/fake_tokenize_engine.h"

namespace prefixgate::tokenize {
namespace {

using fakes::FakeEngine;

class RemoteTokenizerCacheTest : public ::testing::Test {
 protected:
  RemoteTokenizer make(RemoteTokenizerOptions options) {
    return RemoteTokenizer(options, [this](std::string_view model, std::vector<TokenizerPod>& out) {
      if (model == "m") out = pods;
    });
  }
  TokenizeResult run(RemoteTokenizer& tokenizer, const TokenizeInput& input) {
    return fakes::runTokenize(io_, tokenizer, input, nullptr);
  }
  boost::asio::io_context io_;
  std::vector<TokenizerPod> pods;
  const TokenizeInput input_{"m", true, R"([{"role":"user","content":"hello"}])", "", ""};
};

// Ensures an answer longer than the model accepts is used but not cached (issue 24): longer than the engine's
// max_model_len, or, when the engine names none, than max_cached_tokens; one within the context is cached.
TEST_F(RemoteTokenizerCacheTest, OverLongAnswersAreNotCached) {
  FakeEngine engine(io_);
  pods = {engine.pod(1)};
  RemoteTokenizerOptions options;
  options.max_cached_tokens = 2;
  RemoteTokenizer tokenizer = make(options);
  engine.answer = R"({"count":3,"max_model_len":2,"tokens":[1,2,3]})";
  TokenizeResult result = run(tokenizer, input_);
  ASSERT_EQ(result.outcome, TokenizeOutcome::kMiss) << result.error;
  EXPECT_EQ(result.tokens->size(), 3u) << "still used for routing";
  EXPECT_EQ(tokenizer.cache().size(), 0u);
  EXPECT_EQ(run(tokenizer, input_).outcome, TokenizeOutcome::kMiss) << "asked again, not a hit";

  engine.answer = R"({"count":3,"tokens":[1,2,3]})";  // no context named: max_cached_tokens (2) bounds it
  EXPECT_EQ(run(tokenizer, input_).outcome, TokenizeOutcome::kMiss);
  EXPECT_EQ(tokenizer.cache().size(), 0u);

  engine.answer = R"({"count":3,"max_model_len":3,"tokens":[1,2,3]})";  // the model's context governs
  EXPECT_EQ(run(tokenizer, input_).outcome, TokenizeOutcome::kMiss);
  EXPECT_EQ(tokenizer.cache().size(), 1u);
  EXPECT_EQ(run(tokenizer, input_).outcome, TokenizeOutcome::kHit);
  EXPECT_EQ(engine.bodies.size(), 4u);
}

// Ensures the default cache is bounded in bytes (issue 24: 100 distinct 2 MiB prompts held 240 MB; at the old
// 10,000-entry cap, about 23 GB): 100 answers of 600,000 tokens leave it within 64 MiB.
TEST_F(RemoteTokenizerCacheTest, DefaultCacheStaysWithinItsByteBudget) {
  RemoteTokenizer tokenizer = make(RemoteTokenizerOptions{});
  constexpr size_t kBudget = size_t{64} << 20;
  EXPECT_LE(tokenizer.options().cache_bytes, kBudget);
  for (uint64_t i = 0; i < 100; ++i) {
    tokenizer.cache().insert(i * 0x9E3779B97F4A7C15ULL, std::make_shared<const std::vector<uint32_t>>(600000, 7u));
    ASSERT_LE(tokenizer.cache().bytes(), kBudget) << "after " << i + 1 << " answers";
  }
  EXPECT_GT(tokenizer.cache().size(), 0u);
}

}  // namespace
}  // namespace prefixgate::tokenize
