// The simulator's Anthropic Messages API: the prompt of a Messages body and the answers' shapes.
#include "engine_sim/anthropic_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine_sim/request_handlers.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

// Ensures a Messages body has the prompt of the same conversation in chat form, whatever the system's and the
// content's forms (string or text blocks), so prefix caching works across both APIs.
TEST(SimAnthropic, PromptMatchesTheChatForm) {
  const json chat =
      json::parse(R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]})");
  const PromptResult expected = chatPrompt(chat, true);
  ASSERT_TRUE(expected.ok());
  const PromptResult strings = anthropicPrompt(json::parse(R"({"system":"Be brief.","messages":[{"role":"user","content":"hi"}]})"));
  const PromptResult blocks = anthropicPrompt(json::parse(
      R"({"system":[{"type":"text","text":"Be "},{"type":"text","text":"brief."}],
          "messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]})"));
  ASSERT_TRUE(strings.ok()) << strings.error;
  ASSERT_TRUE(blocks.ok()) << blocks.error;
  EXPECT_EQ(strings.prompt.tokens, expected.prompt.tokens);
  EXPECT_EQ(blocks.prompt.tokens, expected.prompt.tokens);
  EXPECT_FALSE(anthropicPrompt(json::parse(R"({"messages":[]})")).ok());
  EXPECT_FALSE(anthropicPrompt(json::parse(R"({"system":5,"messages":[{"role":"user","content":"x"}]})")).ok());
}

// Ensures the whole message and the stream's named events have Anthropic's shapes, in order.
TEST(SimAnthropic, MessageAndEvents) {
  const CompletionMeta meta{Endpoint::kMessages, "msg_1", 7, "m"};
  const Usage usage{12, 3, 0};
  const json whole = messageResponse(meta, " ab cd ef", "length", usage);
  EXPECT_EQ(whole["type"], "message");
  EXPECT_EQ(whole["content"][0], (json{{"type", "text"}, {"text", " ab cd ef"}}));
  EXPECT_EQ(whole["stop_reason"], "max_tokens");
  EXPECT_EQ(whole["usage"], (json{{"input_tokens", 12}, {"output_tokens", 3}}));
  EXPECT_EQ(messageResponse(meta, "", "stop", usage)["stop_reason"], "end_turn");
  const std::string stream = messageStartEvents(meta, usage) + textDeltaEvent(" ab") + messageEndEvents("stop", usage);
  std::vector<std::string> names;
  for (size_t at = 0; (at = stream.find("event: ", at)) != std::string::npos; at += 7)
    names.push_back(stream.substr(at + 7, stream.find('\n', at) - at - 7));
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_NE(stream.find(R"("delta":{"text":" ab","type":"text_delta"})"), std::string::npos) << stream;
  EXPECT_NE(stream.find(R"("usage":{"output_tokens":3})"), std::string::npos) << stream;
}

// Ensures count_tokens answers the prompt's token count, and its errors are Anthropic-shaped.
TEST(SimAnthropic, CountTokens) {
  SimConfig config;
  config.models = {"m"};
  const SimpleResponse ok = handleCountTokens(config, R"({"model":"m","messages":[{"role":"user","content":"hello"}]})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["input_tokens"],
            anthropicPrompt(json::parse(R"({"messages":[{"role":"user","content":"hello"}]})")).prompt.tokens.size());
  const SimpleResponse unknown = handleCountTokens(config, R"({"model":"x","messages":[{"role":"user","content":"a"}]})");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(json::parse(unknown.body)["error"]["type"], "not_found_error");
  EXPECT_EQ(json::parse(handleCountTokens(config, "{bad").body)["type"], "error");
}

}  // namespace
}  // namespace prefixgate::sim
