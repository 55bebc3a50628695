#include "engine_sim/prompt.h"

#include <algorithm>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

// Ensures chat messages become role-marked text in order, with the generation prompt at the end.
TEST(Prompt, ChatTemplateText) {
  json body = json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}]})");
  PromptResult result = chatPrompt(body, true);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(result.prompt.text, "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>");
  EXPECT_EQ(chatPrompt(body, false).prompt.text, "<|system|>Be brief.<|end|><|user|>Hi<|end|>");
}

// Ensures every marker is one special token and each message's content is cut into pieces on its own: 2 + 3 + 1
// tokens for "Be brief." (9 bytes), 2 + 1 for "Hi", 1 for the generation prompt.
TEST(Prompt, ChatTokensMarkersAreSpecialTokens) {
  json body = json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi"}]})");
  std::vector<uint32_t> expected = {specialTokenId("<|system|>"), tokenId("Be b"), tokenId("rief"), tokenId("."),
                                    specialTokenId("<|end|>"),    specialTokenId("<|user|>"), tokenId("Hi"),
                                    specialTokenId("<|end|>"),    specialTokenId("<|assistant|>")};
  EXPECT_EQ(chatPrompt(body, true).prompt.tokens, expected);
}

// Ensures array content contributes its text parts, and null content is empty.
TEST(Prompt, ChatArrayAndNullContent) {
  json body = json::parse(R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "Look "}, {"type": "image_url", "image_url": {}},
                                   {"type": "text", "text": "here"}]},
      {"role": "assistant", "content": null}]})");
  PromptResult result = chatPrompt(body, false);
  ASSERT_TRUE(result.ok()) << result.error;
  EXPECT_EQ(result.prompt.text, "<|user|>Look here<|end|><|assistant|><|end|>");
}

// Ensures a conversation that extends another keeps its prompt as a prefix (so the prefix cache can hit).
TEST(Prompt, ChatTurnsExtendPrefix) {
  json first = json::parse(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"}]})");
  json second = first;
  second["messages"].push_back({{"role", "assistant"}, {"content", "A1"}});
  second["messages"].push_back({{"role", "user"}, {"content", "Q2"}});
  std::string a = chatPrompt(first, false).prompt.text;
  std::string b = chatPrompt(second, false).prompt.text;
  EXPECT_EQ(b.substr(0, a.size()), a);
  std::vector<uint32_t> ta = chatPrompt(first, false).prompt.tokens;
  std::vector<uint32_t> tb = chatPrompt(second, false).prompt.tokens;
  ASSERT_GT(tb.size(), ta.size());
  EXPECT_TRUE(std::equal(ta.begin(), ta.end(), tb.begin()));
}

// Ensures tools are part of the chat prompt, ahead of the messages.
TEST(Prompt, ChatToolsComeFirst) {
  json body = json::parse(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})");
  EXPECT_EQ(chatPrompt(body, false).prompt.text, R"(<|tools|>[{"type":"function"}]<|end|><|user|>x<|end|>)");
}

// Ensures malformed chat bodies are rejected with a message instead of throwing.
TEST(Prompt, ChatRejectsMalformed) {
  EXPECT_FALSE(chatPrompt(json::parse(R"({})"), true).ok());
  EXPECT_FALSE(chatPrompt(json::parse(R"({"messages": []})"), true).ok());
  EXPECT_FALSE(chatPrompt(json::parse(R"({"messages": [{"content": "no role"}]})"), true).ok());
  EXPECT_FALSE(chatPrompt(json::parse(R"({"messages": [{"role": "user", "content": 5}]})"), true).ok());
  EXPECT_FALSE(chatPrompt(json::parse(R"([1, 2])"), true).ok());
}

// Ensures completion prompts accept text, lists of text (concatenated), token ids and lists of token ids.
TEST(Prompt, CompletionForms) {
  PromptResult text = completionPrompt(json::parse(R"({"prompt": "Hello world!"})"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.prompt.tokens, tokenize("Hello world!"));
  PromptResult list = completionPrompt(json::parse(R"({"prompt": ["Hello ", "world!"]})"));
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list.prompt.text, "Hello world!");
  PromptResult ids = completionPrompt(json::parse(R"({"prompt": [7, 8, 4294967295]})"));
  ASSERT_TRUE(ids.ok()) << ids.error;
  EXPECT_EQ(ids.prompt.tokens, (std::vector<uint32_t>{7, 8, 4294967295u}));
  EXPECT_TRUE(ids.prompt.text.empty());
  PromptResult nested = completionPrompt(json::parse(R"({"prompt": [[1, 2], [3]]})"));
  ASSERT_TRUE(nested.ok());
  EXPECT_EQ(nested.prompt.tokens, (std::vector<uint32_t>{1, 2, 3}));
}

// Ensures bad completion prompts are rejected: missing, empty, mixed or out-of-range ids.
TEST(Prompt, CompletionRejectsMalformed) {
  EXPECT_FALSE(completionPrompt(json::parse(R"({})")).ok());
  EXPECT_FALSE(completionPrompt(json::parse(R"({"prompt": ""})")).ok());
  EXPECT_FALSE(completionPrompt(json::parse(R"({"prompt": []})")).ok());
  EXPECT_FALSE(completionPrompt(json::parse(R"({"prompt": ["a", 1]})")).ok());
  EXPECT_FALSE(completionPrompt(json::parse(R"({"prompt": [-1]})")).ok());
  EXPECT_FALSE(completionPrompt(json::parse(R"({"prompt": [4294967296]})")).ok());
  EXPECT_FALSE(completionPrompt(json::parse(R"({"prompt": 12})")).ok());
}

// Ensures embedding inputs give one prompt per input, in every accepted shape.
TEST(Prompt, EmbeddingInputs) {
  EXPECT_EQ(embeddingInputs(json::parse(R"({"input": "one"})")).prompts.size(), 1u);
  EXPECT_EQ(embeddingInputs(json::parse(R"({"input": ["one", "two"]})")).prompts.size(), 2u);
  EXPECT_EQ(embeddingInputs(json::parse(R"({"input": [1, 2, 3]})")).prompts.size(), 1u);
  EXPECT_EQ(embeddingInputs(json::parse(R"({"input": [[1], [2, 3]]})")).prompts.size(), 2u);
  EXPECT_FALSE(embeddingInputs(json::parse(R"({"input": ""})")).ok());
  EXPECT_FALSE(embeddingInputs(json::parse(R"({"input": {}})")).ok());
}

}  // namespace
}  // namespace prefixgate::sim
