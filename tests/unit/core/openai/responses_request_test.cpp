#include "openai/responses_request.h"

#include <gtest/gtest.h>

#include <string>

namespace prefixgate::openai {
namespace {

RequestView parsed(std::string body, bool include_tools = true) {
  RequestView view;
  const ParseError error = parseRequest(Endpoint::kResponses, body, include_tools, 64, view);
  EXPECT_FALSE(error) << error.message;
  return view;
}

ParseError refusal(std::string body) {
  RequestView view;
  return parseRequest(Endpoint::kResponses, body, true, 64, view);
}

// Ensures instructions then a string input make the prompt text, as a chat system message and user message would.
TEST(ResponsesRequest, InstructionsThenStringInputAsChat) {
  const RequestView view = parsed(R"({"model":"m","instructions":"Be brief.","input":"hello","stream":true,
                                      "max_output_tokens":7})");
  EXPECT_EQ(view.endpoint, Endpoint::kResponses);
  EXPECT_EQ(view.model, "m");
  EXPECT_TRUE(view.stream);
  EXPECT_EQ(view.max_tokens, 7u);
  EXPECT_EQ(view.prompt_text, "Be brief. hello");
  RequestView chat;
  std::string chat_body = R"({"model":"m","messages":[{"role":"system","content":"Be brief."},
                              {"role":"user","content":"hello"}]})";
  ASSERT_FALSE(parseRequest(Endpoint::kChatCompletions, chat_body, true, 64, chat));
  EXPECT_EQ(view.prompt_text, chat.prompt_text);
}

// Ensures message items (string or text parts), function calls and their outputs each add one unit, in order.
TEST(ResponsesRequest, ItemsOfEveryKind) {
  const RequestView view = parsed(R"({"model":"m","input":[
      {"role":"user","content":"q1"},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"a1"}]},
      {"role":"user","content":[{"type":"input_text","text":"p1"},{"type":"input_text","text":"p2"}]},
      {"type":"function_call","call_id":"c","name":"get","arguments":"{\"x\":1}"},
      {"type":"function_call_output","call_id":"c","output":"42"},
      {"type":"reasoning","summary":[]}]})");
  EXPECT_EQ(view.prompt_text, R"(q1 a1 p1 p2 get {"x":1} 42 {"type":"reasoning","summary":[]})");
}

// Ensures tools come first when included, and not at all otherwise.
TEST(ResponsesRequest, ToolsFirstWhenIncluded) {
  const std::string body = R"({"model":"m","tools":[{"type":"function","name":"f"}],"input":"hi"})";
  EXPECT_EQ(parsed(body).prompt_text, R"([{"type":"function","name":"f"}] hi)");
  EXPECT_EQ(parsed(body, false).prompt_text, "hi");
}

// Ensures a body continuing a stored response needs no input, and its id is read (valid ids only; the last one given).
TEST(ResponsesRequest, PreviousResponseId) {
  EXPECT_EQ(parsed(R"({"model":"m","previous_response_id":"resp_abc123"})").previous_response_id, "resp_abc123");
  EXPECT_EQ(parsed(R"({"model":"m","input":"x"})").previous_response_id, "");
  EXPECT_EQ(parsed(R"({"model":"m","previous_response_id":"../../etc"})").previous_response_id, "");
  EXPECT_EQ(parsed(R"({"model":"m","previous_response_id":7})").previous_response_id, "");
  EXPECT_EQ(parsed(R"({"model":"m","previous_response_id":"resp_a","previous_response_id":"resp_b"})")
                .previous_response_id,
            "resp_b");
  EXPECT_EQ(parsed(R"({"model":"m","previous_response_id":"resp_a","previous_response_id":null})")
                .previous_response_id,
            "");
  // Only the Responses API has one.
  RequestView chat;
  std::string body = R"({"model":"m","messages":[{"role":"user","content":"x"}],"previous_response_id":"resp_a"})";
  ASSERT_FALSE(parseRequest(Endpoint::kChatCompletions, body, true, 64, chat));
  EXPECT_EQ(chat.previous_response_id, "");
}

// Ensures the Responses API's own output bound is read, and chat's names are not (the engine ignores them there).
TEST(ResponsesRequest, MaxOutputTokensOnly) {
  EXPECT_EQ(parsed(R"({"model":"m","input":"x","max_output_tokens":9})").max_tokens, 9u);
  EXPECT_EQ(parsed(R"({"model":"m","input":"x","max_tokens":9,"max_completion_tokens":8})").max_tokens, 0u);
}

// Ensures malformed or incomplete bodies are refused with 400 and the field named.
TEST(ResponsesRequest, Refusals) {
  EXPECT_EQ(refusal(R"({"model":"m","input":)").status, 400);
  EXPECT_EQ(refusal(R"({"input":"x"})").param, "model");
  EXPECT_EQ(refusal(R"({"model":"m","input":5})").param, "input");
  EXPECT_EQ(refusal(R"({"model":"m","input":[{"content":7}]})").param, "input");
  EXPECT_EQ(refusal(R"({"model":"m","stream":"yes","input":"x"})").param, "stream");
  EXPECT_EQ(refusal(R"([1,2])").status, 400);
  EXPECT_EQ(endpointName(Endpoint::kResponses), "responses");
  EXPECT_TRUE(matchesPrompt(Endpoint::kResponses));
  EXPECT_FALSE(isAnthropic(Endpoint::kResponses));
}

// Ensures response ids are bounded in length and characters.
TEST(ResponsesRequest, ValidResponseId) {
  EXPECT_TRUE(validResponseId("resp_0123abcdef"));
  EXPECT_TRUE(validResponseId(std::string(kMaxResponseIdBytes, 'a')));
  EXPECT_FALSE(validResponseId(std::string(kMaxResponseIdBytes + 1, 'a')));
  EXPECT_FALSE(validResponseId(""));
  EXPECT_FALSE(validResponseId("resp/1"));
  EXPECT_FALSE(validResponseId("resp%2F"));
  EXPECT_FALSE(validResponseId(std::string("resp\0x", 6)));
}

}  // namespace
}  // namespace prefixgate::openai
