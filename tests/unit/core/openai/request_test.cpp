#include "openai/request.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "openai/errors.h"

namespace prefixgate::openai {
namespace {

constexpr uint32_t kDefaultMaxJsonDepth = config::LimitsConfig{}.max_json_depth;

ParseError parse(Endpoint e, std::string body, RequestView& out, bool include_tools = true,
                 uint32_t max_json_depth = kDefaultMaxJsonDepth) {
  return parseRequest(e, body, include_tools, max_json_depth, out);
}

// A chat body nested `depth` deep (its own object included) in the field "x", which the parser does not read:
// arrays, or objects when `objects`.
std::string chatNestedTo(uint32_t depth, bool objects = false) {
  std::string x;
  for (uint32_t i = 1; i < depth; ++i) x += objects ? R"({"a":)" : "[";
  x += "1";
  x.append(depth - 1, objects ? '}' : ']');
  return R"({"model":"m","messages":[{"content":"x"}],"x":)" + x + "}";
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

// Ensures a top-level kv_transfer_params is noticed (the gateway removes a client's before a pod sees it), whatever
// its value, and a nested one is not.
TEST(ParseRequest, NoticesKvTransferParams) {
  RequestView r;
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":"abc"})", r));
  EXPECT_FALSE(r.has_kv_transfer_params);
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","kv_transfer_params":{"remote_host":"h"},"prompt":"a"})",
                     r));
  EXPECT_TRUE(r.has_kv_transfer_params);
  RequestView chat;
  ASSERT_FALSE(parse(Endpoint::kChatCompletions,
                     R"({"model":"m","messages":[{"role":"user","content":"x","kv_transfer_params":{}}]})", chat));
  EXPECT_FALSE(chat.has_kv_transfer_params);
  ASSERT_FALSE(parse(Endpoint::kChatCompletions,
                     R"({"model":"m","messages":[{"role":"user","content":"x"}],"kv_transfer_params":null})", chat));
  EXPECT_TRUE(chat.has_kv_transfer_params);
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
      {Endpoint::kRerank, R"({"model":"m","documents":["a"]})", "query", "'query' is required"},
      {Endpoint::kRerank, R"({"model":"m","query":"q","documents":null})", "documents", "'documents' is required"},
      {Endpoint::kRerank, R"({"query":"q","documents":["a"]})", "model", "'model' is required"},
      {Endpoint::kScore, R"({"model":"m","text_2":"b"})", "text_1", "'text_1' is required"},
      {Endpoint::kScore, R"({"model":"m","text_1":"a"})", "text_2", "'text_2' is required"},
      {Endpoint::kScore, R"({"model":"m","text_1":"a","text_2":["b",)", "", "not valid JSON"},
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

// A body nested to limits.max_json_depth parses; one level more is refused with a message naming the key, even
// though the deep value is in a field the parser skips.
TEST(ParseRequest, JsonDepthLimit) {
  for (bool objects : {false, true}) {
    RequestView r;
    EXPECT_FALSE(parse(Endpoint::kChatCompletions, chatNestedTo(kDefaultMaxJsonDepth - 1, objects), r));
    EXPECT_FALSE(parse(Endpoint::kChatCompletions, chatNestedTo(kDefaultMaxJsonDepth, objects), r));
    auto err = parse(Endpoint::kChatCompletions, chatNestedTo(kDefaultMaxJsonDepth + 1, objects), r);
    EXPECT_EQ(err.status, 400);
    EXPECT_NE(err.message.find("limits.max_json_depth (64)"), std::string::npos) << err.message;
    EXPECT_EQ(parse(Endpoint::kChatCompletions, chatNestedTo(4, objects), r, true, 3).status, 400);
    EXPECT_FALSE(parse(Endpoint::kChatCompletions, chatNestedTo(3, objects), r, true, 3));
  }
  // 100,000 unclosed brackets, and brackets after a NUL byte (the scan steps over it): refused by depth.
  for (std::string head : {std::string(R"({"model":"m","prompt":"p","x":)"), std::string("{\0 \"x\":", 7)}) {
    RequestView r;
    auto err = parse(Endpoint::kCompletions, head + std::string(100000, '['), r);
    EXPECT_NE(err.message.find("limits.max_json_depth"), std::string::npos) << err.message;
  }
}

// Brackets inside strings are text, not nesting, whatever escapes surround them.
TEST(ParseRequest, JsonDepthIgnoresStrings) {
  const std::string deep_text(200, '[');
  for (const std::string& content : {deep_text, "\\\"" + deep_text + "\\\\", "\\\\\\\"{{{{{{" + deep_text}) {
    RequestView r;
    std::string body = R"({"model":"m","messages":[{"content":")" + content + R"("}],"tool_choice":"[[[["})";
    auto err = parse(Endpoint::kChatCompletions, body, r, true, 3);
    EXPECT_FALSE(err) << body << " -> " << err.message;
  }
  // A string that closes after an even run of backslashes: the brackets after it count again.
  RequestView r;
  const std::string body = R"({"model":"m\\","messages":[{"content":"x"}],"x":[[[1]]]})";
  EXPECT_EQ(parse(Endpoint::kChatCompletions, body, r, true, 3).status, 400);
}

// A field given twice counts as its last occurrence, as the engine reads it, never as a mix of both (found by
// request_body_fuzz: prompt text from one "prompt" stayed next to token ids from another, and two "messages"
// arrays were joined).
TEST(ParseRequest, RepeatedFieldsLastOneWins) {
  RequestView r;
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":"text","prompt":[5,5]})", r));
  EXPECT_TRUE(r.has_token_ids);
  EXPECT_EQ(r.prompt_token_ids, (std::vector<uint32_t>{5, 5}));
  EXPECT_EQ(r.prompt_text, "");
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":[1,2],"prompt":"text"})", r));
  EXPECT_FALSE(r.has_token_ids);
  EXPECT_EQ(r.prompt_text, "text");
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":[1,2],"prompt":[3]})", r));
  EXPECT_EQ(r.prompt_token_ids, (std::vector<uint32_t>{3}));
  // raw_messages is a view into the body: the body must outlive it (parse() copies its argument).
  std::string chat = R"({"model":"m","tools":[1],"messages":[{"content":"a"}],
    "stream_options":{"include_usage":true},"messages":[{"content":"b"}],"tools":null,"stream_options":{}})";
  ASSERT_FALSE(parseRequest(Endpoint::kChatCompletions, chat, true, kDefaultMaxJsonDepth, r));
  EXPECT_EQ(r.prompt_text, "b");
  EXPECT_FALSE(r.include_usage);
  EXPECT_EQ(r.raw_messages, R"([{"content":"b"}])");
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

namespace prefixgate::openai {
namespace {

// Ensures the output a request asks for is read from max_completion_tokens (which wins, in either order) or
// max_tokens, and that anything else leaves it unknown for the engine to validate.
TEST(ParseRequest, MaxTokens) {
  auto max_tokens = [](const std::string& fields) {
    RequestView r;
    std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}])" + fields + "}";
    EXPECT_FALSE(parse(Endpoint::kChatCompletions, body, r));
    return r.max_tokens;
  };
  EXPECT_EQ(max_tokens(R"(,"max_tokens":64)"), 64u);
  EXPECT_EQ(max_tokens(R"(,"max_completion_tokens":32,"max_tokens":64)"), 32u);
  EXPECT_EQ(max_tokens(R"(,"max_tokens":64,"max_completion_tokens":32)"), 32u);
  EXPECT_EQ(max_tokens(R"(,"max_tokens":"64")"), 0u);
  EXPECT_EQ(max_tokens(R"(,"max_tokens":-1)"), 0u);
  EXPECT_EQ(max_tokens(R"(,"max_tokens":null)"), 0u);
  EXPECT_EQ(max_tokens(""), 0u);
}


// cache_salt is read when a string (another type is the engine's to refuse) and is not part of the prompt text.
TEST(ParseRequest, CacheSalt) {
  RequestView r;
  ASSERT_FALSE(parse(Endpoint::kChatCompletions,
                     R"({"model":"m","cache_salt":"tenant-a","messages":[{"role":"user","content":"x"}]})", r));
  EXPECT_EQ(r.cache_salt, "tenant-a");
  EXPECT_EQ(r.prompt_text, "x");
  RequestView c;
  ASSERT_FALSE(parse(Endpoint::kCompletions, R"({"model":"m","prompt":"x","cache_salt":7})", c));
  EXPECT_EQ(c.cache_salt, "");
}
// Rerank and score: the model is read, their inputs are sized (query then documents; text_1 then text_2, as raw
// JSON) but never matched; other endpoints' fields are not read from them.
TEST(ParseRequest, RerankAndScoreReadTheModelAndSizeTheInputs) {
  RequestView r;
  ASSERT_FALSE(parse(Endpoint::kRerank,
                     R"({"documents":["a b", "c"],"model":"rr","query":"what?","top_n":1,"messages":[1],"prompt":5})", r));
  EXPECT_EQ(r.endpoint, Endpoint::kRerank);
  EXPECT_EQ(r.model, "rr");
  EXPECT_EQ(r.prompt_text, R"("what?" ["a b", "c"])");
  EXPECT_TRUE(r.raw_messages.empty());
  EXPECT_TRUE(r.raw_prompt.empty());
  ASSERT_FALSE(parse(Endpoint::kScore, R"({"model":"sc","text_1":"a","text_2":["b","c"],"user":"u"})", r));
  EXPECT_EQ(r.model, "sc");
  EXPECT_EQ(r.user, "u");
  EXPECT_EQ(r.prompt_text, R"("a" ["b","c"])");
  EXPECT_FALSE(matchesPrompt(Endpoint::kRerank));
  EXPECT_FALSE(matchesPrompt(Endpoint::kScore));
  EXPECT_TRUE(matchesPrompt(Endpoint::kEmbeddings));
  EXPECT_EQ(endpointName(Endpoint::kRerank), "rerank");
  EXPECT_EQ(endpointName(Endpoint::kScore), "score");
}

// Anthropic messages hash like chat: tools, then the system prompt, then each content block's text, one space
// apart; a system prompt as a string or as text blocks, and content as a string or one text block, give the same
// text, and a moving cache_control marker changes nothing.
TEST(ParseRequest, AnthropicMessagesPromptTextFollowsChat) {
  RequestView chat, a, b;
  ASSERT_FALSE(parse(Endpoint::kChatCompletions, R"({"model":"m","messages":[{"role":"system","content":"Be brief."},
    {"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]})", chat));
  ASSERT_FALSE(parse(Endpoint::kMessages, R"({"model":"m","max_tokens":5,"system":"Be brief.","stream":true,
    "messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]})", a));
  EXPECT_EQ(a.prompt_text, chat.prompt_text);
  EXPECT_TRUE(a.stream);
  EXPECT_EQ(a.max_tokens, 5u);
  EXPECT_EQ(a.endpoint, Endpoint::kMessages);
  ASSERT_FALSE(parse(Endpoint::kMessages, R"({"messages":[{"role":"user","content":[{"type":"text","text":"hi",
    "cache_control":{"type":"ephemeral"}}]},{"content":[{"text":"hello","type":"text"}],"role":"assistant"}],
    "system":[{"type":"text","text":"Be "},{"type":"text","text":"brief.","cache_control":{"type":"ephemeral"}}],
    "model":"m"})", b));
  EXPECT_EQ(b.prompt_text, chat.prompt_text);
  EXPECT_FALSE(b.raw_messages.empty());
}

// Tool use, tool results, tools and other blocks: tool_use as its name and input, tool_result as its content,
// tools first (when asked), any other block as its JSON.
TEST(ParseRequest, AnthropicBlocksAndTools) {
  RequestView r;
  // raw_tools is a view into the body: the body outlives the checks.
  std::string body = R"({"model":"m","tools":[{"name":"f"}],"messages":[
    {"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"x": 1}}]},
    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"42"}]},
                              {"type":"tool_result","tool_use_id":"u","content":"done"},
                              {"type":"image","source":{"data":"AA=="}}]}]})";
  ASSERT_FALSE(parseRequest(Endpoint::kMessages, body, true, kDefaultMaxJsonDepth, r));
  EXPECT_EQ(r.prompt_text, R"([{"name":"f"}] f {"x": 1} 42 done {"type":"image","source":{"data":"AA=="}})");
  EXPECT_EQ(r.raw_tools, R"([{"name":"f"}])");
  ASSERT_FALSE(parse(Endpoint::kMessagesCountTokens, R"({"model":"m","tools":[1],"messages":[{"content":"x"}]})", r,
                     false));
  EXPECT_EQ(r.prompt_text, "x");
  EXPECT_TRUE(isAnthropic(Endpoint::kMessagesCountTokens));
  EXPECT_FALSE(matchesPrompt(Endpoint::kMessagesCountTokens));
  EXPECT_TRUE(matchesPrompt(Endpoint::kMessages));
}

// Bad Anthropic bodies get a 400 naming the field.
TEST(ParseRequest, AnthropicBadInput) {
  struct Case {
    const char* body;
    const char* param;
    const char* words;
  } cases[] = {
      {R"({"model":"m"})", "messages", "'messages' is required"},
      {R"({"model":"m","messages":[]})", "messages", "must not be empty"},
      {R"({"model":"m","messages":[{"content":5}]})", "messages", "string or an array of content blocks"},
      {R"({"model":"m","messages":[{"content":[5]}]})", "messages", "must be an object"},
      {R"({"model":"m","system":5,"messages":[{"content":"x"}]})", "system", "'system' must be"},
      {R"({"messages":[{"content":"x"}]})", "model", "'model' is required"},
  };
  for (const Case& c : cases) {
    RequestView r;
    auto err = parse(Endpoint::kMessages, c.body, r);
    EXPECT_EQ(err.status, 400) << c.body;
    EXPECT_EQ(err.param, c.param) << c.body;
    EXPECT_NE(err.message.find(c.words), std::string::npos) << c.body << " -> " << err.message;
  }
}

}  // namespace
}  // namespace prefixgate::openai
