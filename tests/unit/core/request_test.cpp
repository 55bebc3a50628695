#include "openai/request.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "openai/errors.h"

namespace prefixgate::openai {
namespace {

ParseError parse(Endpoint e, std::string body, RequestView& out, bool include_tools = true) {
  return parseRequest(e, body, include_tools, out);
}

// Chat: model, stream and the prompt text (message contents joined by one space; tools first).
TEST(ParseRequest, ChatPromptTextWithTools) {
  RequestView r;
  auto err = parse(Endpoint::kChatCompletions, R"({"model":"m","stream":true,"stream_options":{"include_usage":true},
    "tools":[{"type":"function","function":{"name":"f"}}],
    "messages":[{"role":"system","content":"Be \"brief\"."},{"role":"user","content":[{"type":"text","text":"hi"}]},
                {"role":"assistant","content":null},{"role":"user","content":"bye"}]})", r);
  ASSERT_FALSE(err) << err.message;
  EXPECT_EQ(r.model, "m");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.prompt_text, R"([{"type":"function","function":{"name":"f"}}] Be "brief". [{"type":"text","text":"hi"}] bye)");
}

// With include_tools off, tools do not enter the prompt text.
TEST(ParseRequest, ToolsLeftOutWhenAsked) {
  RequestView r;
  ASSERT_FALSE(parse(Endpoint::kChatCompletions, R"({"model":"m","tools":[1],"messages":[{"role":"user","content":"x"}]})", r, false));
  EXPECT_EQ(r.prompt_text, "x");
}

// Completions: a string, a list of strings (joined) or token ids (used directly).
TEST(ParseRequest, CompletionPromptForms) {
  RequestView r;
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":"abc"})", r));
  EXPECT_EQ(r.prompt_text, "abc");
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":["ab","cd"]})", r));
  EXPECT_EQ(r.prompt_text, "ab cd");
  EXPECT_FALSE(r.has_token_ids);
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":[1,2,4294967295]})", r));
  EXPECT_TRUE(r.has_token_ids);
  EXPECT_EQ(r.prompt_token_ids, (std::vector<uint32_t>{1, 2, 4294967295u}));
}

// Each kind of bad input gets a 400 with a message naming the field.
TEST(ParseRequest, BadInputNamesTheField) {
  struct Case {
    Endpoint endpoint;
    const char* body;
    const char* param;
    const char* words;
  } cases[] = {
      {Endpoint::kChatCompletions, R"({"model":"m","messages":[)", "", "not valid JSON"},
      {Endpoint::kChatCompletions, R"([1,2])", "", "must be a JSON object"},
      {Endpoint::kChatCompletions, R"({"messages":[{"role":"user","content":"x"}]})", "model", "'model' is required"},
      {Endpoint::kChatCompletions, R"({"model":5,"messages":[]})", "model", "'model' must be a string"},
      {Endpoint::kChatCompletions, R"({"model":"","messages":[{"content":"x"}]})", "model", "must not be empty"},
      {Endpoint::kChatCompletions, R"({"model":"m"})", "messages", "'messages' is required"},
      {Endpoint::kChatCompletions, R"({"model":"m","messages":"hi"})", "messages", "must be an array"},
      {Endpoint::kChatCompletions, R"({"model":"m","messages":[]})", "messages", "must not be empty"},
      {Endpoint::kChatCompletions, R"({"model":"m","messages":[{"content":5}]})", "messages", "content"},
      {Endpoint::kChatCompletions, R"({"model":"m","stream":"yes","messages":[{"content":"x"}]})", "stream", "boolean"},
      {Endpoint::kCompletions, R"({"model":"m"})", "prompt", "'prompt' is required"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":[1,"a"]})", "prompt", "list of token ids"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":{}})", "prompt", "must be a string"},
      {Endpoint::kEmbeddings, R"({"model":"m"})", "input", "'input' is required"},
      {Endpoint::kCompletions, R"({"model":"m","prompt":"x"} {"more":1})", "", "trailing"},
  };
  for (const Case& c : cases) {
    RequestView r;
    auto err = parse(c.endpoint, c.body, r);
    EXPECT_EQ(err.status, 400) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body;
    EXPECT_NE(err.message.find(c.words), std::string::npos) << c.body << " -> " << err.message;
  }
}

// Error bodies have OpenAI's shape.
TEST(ErrorBody, HasOpenAIShape) {
  auto j = nlohmann::json::parse(errorBody(404, "no such model", "model"));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "not_found_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], 404);
  EXPECT_TRUE(nlohmann::json::parse(errorBody(400, "x"))["error"]["param"].is_null());
}

}  // namespace
}  // namespace prefixgate::openai
