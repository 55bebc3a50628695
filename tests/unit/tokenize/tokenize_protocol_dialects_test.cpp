// The tokenize protocol per engine dialect (tokenize/tokenize_protocol.h), without sockets: which dialect can
// tokenize which request, the bodies built for vLLM, SGLang and llama.cpp, llama.cpp's /apply-template answer (a
// strict JSON string, checked against nlohmann's parser), each dialect's /tokenize answer, and the pod order that
// puts the pods able to answer first. The client end to end is in tests/unit/core/tokenize/remote_tokenizer_test.cpp.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tokenize/tokenize_protocol.h"

namespace prefixgate::tokenize {
namespace {

using engine::EngineKind;
using nlohmann::json;

const TokenizeInput kChat{"m", true, R"([{"role":"user","content":"hi"}])", "", ""};
const TokenizeInput kChatWithTools{"m", true, R"([{"role":"user","content":"hi"}])",
                                   R"([{"type":"function","function":{"name":"f"}}])", ""};
const TokenizeInput kStringPrompt{"m", false, "", "", R"("a\"b\nc \u00e9")"};
const TokenizeInput kListPrompt{"m", false, "", "", R"(["ab", "cd"])"};

// ---- which dialect can tokenize what ----

// Ensures a pod whose engine is not known yet is spoken to as vLLM, and a known one in its own dialect.
TEST(TokenizeDialects, UnknownEngineIsSpokenToAsVllm) {
  EXPECT_EQ(spokenDialect(EngineKind::kAuto), EngineKind::kVllm);
  EXPECT_EQ(spokenDialect(EngineKind::kVllm), EngineKind::kVllm);
  EXPECT_EQ(spokenDialect(EngineKind::kSglang), EngineKind::kSglang);
  EXPECT_EQ(spokenDialect(EngineKind::kLlamaCpp), EngineKind::kLlamaCpp);
}

// Ensures SGLang refuses chat requests (its /tokenize has no chat form) and lists of prompts, llama.cpp refuses only
// lists of prompts (its chat goes through /apply-template), and vLLM (or an unknown engine) is asked everything.
TEST(TokenizeDialects, WhatEachDialectCanTokenize) {
  EXPECT_EQ(unsupportedReason(EngineKind::kSglang, kChat), "SGLang's /tokenize has no chat form");
  EXPECT_EQ(unsupportedReason(EngineKind::kSglang, kChatWithTools), "SGLang's /tokenize has no chat form");
  EXPECT_EQ(unsupportedReason(EngineKind::kSglang, kStringPrompt), "");
  EXPECT_NE(unsupportedReason(EngineKind::kSglang, kListPrompt), "");
  EXPECT_EQ(unsupportedReason(EngineKind::kLlamaCpp, kChat), "");
  EXPECT_EQ(unsupportedReason(EngineKind::kLlamaCpp, kStringPrompt), "");
  EXPECT_NE(unsupportedReason(EngineKind::kLlamaCpp, kListPrompt).find("list of prompts"), std::string_view::npos);
  for (EngineKind kind : {EngineKind::kVllm, EngineKind::kAuto})
    for (const TokenizeInput* input : {&kChat, &kChatWithTools, &kStringPrompt, &kListPrompt})
      EXPECT_EQ(unsupportedReason(kind, *input), "");
  TokenizeInput spaced = kStringPrompt;
  spaced.prompt = " \n\"x\"";
  EXPECT_EQ(unsupportedReason(EngineKind::kSglang, spaced), "");
  EXPECT_TRUE(needsApplyTemplate(EngineKind::kLlamaCpp, kChat));
  EXPECT_FALSE(needsApplyTemplate(EngineKind::kLlamaCpp, kStringPrompt));
  EXPECT_FALSE(needsApplyTemplate(EngineKind::kVllm, kChat));
  EXPECT_FALSE(needsApplyTemplate(EngineKind::kAuto, kChat));
}

// ---- the bodies ----

// Ensures vLLM's bodies are unchanged by dialects (an unknown engine gets them too), and SGLang's completion form is
// vLLM's byte for byte (its TokenizeRequest: model, prompt, add_special_tokens).
TEST(TokenizeDialects, VllmAndSglangBodies) {
  const std::string chat = R"({"model":"m","messages":[{"role":"user","content":"hi"}],)"
                           R"("tools":[{"type":"function","function":{"name":"f"}}],)"
                           R"("add_generation_prompt":true,"add_special_tokens":false})";
  EXPECT_EQ(buildTokenizeBody(kChatWithTools), chat);
  EXPECT_EQ(buildTokenizeBody(kChatWithTools, EngineKind::kAuto), chat);
  const std::string completion = R"({"model":"m","prompt":"a\"b\nc \u00e9","add_special_tokens":true})";
  EXPECT_EQ(buildTokenizeBody(kStringPrompt, EngineKind::kVllm), completion);
  EXPECT_EQ(buildTokenizeBody(kStringPrompt, EngineKind::kSglang), completion);
  EXPECT_EQ(json::parse(completion)["prompt"], "a\"b\nc \u00e9");
}

// Ensures llama.cpp's completion is one /tokenize with the client's prompt as content (escapes as sent), the model
// (its router mode picks the model by it), and add_special and parse_special on, as its completion endpoints
// tokenize a prompt.
TEST(TokenizeDialects, LlamaCppCompletionBody) {
  const std::string body = buildTokenizeBody(kStringPrompt, EngineKind::kLlamaCpp);
  EXPECT_EQ(body, R"({"model":"m","content":"a\"b\nc \u00e9","add_special":true,"parse_special":true})");
  const json doc = json::parse(body);
  EXPECT_EQ(doc["content"], "a\"b\nc \u00e9");
  EXPECT_EQ(doc["add_special"], true);
  EXPECT_EQ(doc["parse_special"], true);
  EXPECT_EQ(doc.size(), 4u);
  EXPECT_EQ(buildLlamaCppTokenizeBody("m\"q", R"("x")"),
            R"({"model":"m\"q","content":"x","add_special":true,"parse_special":true})");
}

// Ensures llama.cpp's /apply-template gets the request's own messages and tools, byte for byte, and the model, and
// nothing that would change the template's defaults (add_generation_prompt is left to the server, as the chat
// request that carries none leaves it).
TEST(TokenizeDialects, LlamaCppApplyTemplateBody) {
  EXPECT_EQ(buildApplyTemplateBody(kChatWithTools),
            R"({"model":"m","messages":[{"role":"user","content":"hi"}],)"
            R"("tools":[{"type":"function","function":{"name":"f"}}]})");
  EXPECT_EQ(buildApplyTemplateBody(kChat), R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_NO_THROW(json::parse(buildApplyTemplateBody(kChatWithTools)));
}

// ---- llama.cpp's /apply-template answer ----

// Ensures the templated prompt is taken as its JSON literal (other fields skipped, any key order and spacing), and
// the /tokenize body built from it decodes to exactly the text the template rendered: escapes, non-ASCII UTF-8 and
// surrogate pairs included.
TEST(ApplyTemplateAnswer, PassesThePromptOnExactly) {
  const std::string rendered = "<|user|>\n\"hi\" \\ caf\xC3\xA9 \xF0\x9F\x98\x80\t\x01<|assistant|>\n";
  const std::string answer = " {\"x\": [1, {\"y\": null}], \"prompt\" : " + json(rendered).dump() + " }\n";
  std::string_view prompt;
  std::string error;
  ASSERT_TRUE(parseApplyTemplateAnswer(answer, prompt, error)) << error;
  EXPECT_EQ(prompt, json(rendered).dump());
  EXPECT_EQ(json::parse(buildLlamaCppTokenizeBody("m", prompt))["content"], rendered);
  // The same text escaped otherwise (ASCII-only, \u escapes, a surrogate pair, an escaped slash) decodes the same.
  const std::string escaped =
      R"({"prompt":"<|user|>\n\"hi\" \\ caf\u00E9 \ud83d\ude00\t\u0001<\/assistant|>\n"})";
  ASSERT_TRUE(parseApplyTemplateAnswer(escaped, prompt, error)) << error;
  EXPECT_EQ(json::parse(buildLlamaCppTokenizeBody("m", prompt))["content"],
            "<|user|>\n\"hi\" \\ caf\xC3\xA9 \xF0\x9F\x98\x80\t\x01</assistant|>\n");
  ASSERT_TRUE(parseApplyTemplateAnswer(R"({"prompt":""})", prompt, error)) << error;
  EXPECT_EQ(prompt, R"("")");
}

// Ensures every malformed answer is refused with a reason: not an object, trailing bytes, "prompt" missing,
// repeated or not a string, and strings a JSON parser refuses (bad escapes, lone surrogates, raw control characters,
// ill-formed UTF-8).
TEST(ApplyTemplateAnswer, RejectsMalformedAnswers) {
  const std::string bad[] = {
      "",
      "null",
      R"(["x"])",
      R"("x")",
      R"({})",
      R"({"prompts":"x"})",
      R"({"prompt":"x")",
      R"({"prompt":"x"} x)",
      R"({"prompt":"x"}{})",
      R"({"prompt":"x","prompt":"y"})",
      R"({"prompt":null})",
      R"({"prompt":1})",
      R"({"prompt":["x"]})",
      R"({"prompt":{"text":"x"}})",
      R"({"prompt":"x)",
      R"({"prompt":"\q"})",
      R"({"prompt":"\x41"})",
      R"({"prompt":"\u12"})",
      R"({"prompt":"\u12G4"})",
      R"({"prompt":"\ud800"})",
      R"({"prompt":"\ud800x"})",
      R"({"prompt":"\ud800\u0041"})",
      R"({"prompt":"\udc00"})",
      R"({"prompt":"\udc00\ud800"})",
      "{\"prompt\":\"a\nb\"}",
      "{\"prompt\":\"a\tb\"}",
      std::string("{\"prompt\":\"a\0b\"}", 14),
      "{\"prompt\":\"\xC0\x80\"}",          // overlong NUL
      "{\"prompt\":\"\xE0\x80\xAF\"}",      // overlong '/'
      "{\"prompt\":\"\xED\xA0\x80\"}",      // a surrogate in UTF-8
      "{\"prompt\":\"\xF4\x90\x80\x80\"}",  // past U+10FFFF
      "{\"prompt\":\"\xF5\x80\x80\x80\"}",
      "{\"prompt\":\"\xFF\"}",
      "{\"prompt\":\"\x80\"}",
      "{\"prompt\":\"\xC3\"}",              // truncated before the quote
      "{\"prompt\":\"\xE2\x9C\"}",
      "{\"prompt\":\"x\",\"y\":}",
  };
  for (const std::string& body : bad) {
    std::string_view prompt;
    std::string error;
    EXPECT_FALSE(parseApplyTemplateAnswer(body, prompt, error)) << body;
    EXPECT_FALSE(error.empty()) << body;
  }
}

// Ensures the prompt string is accepted exactly when nlohmann's strict parser accepts it, and then passes on as the
// same text, over seeded random strings of escapes, control characters and UTF-8 fragments (valid and not).
TEST(ApplyTemplateAnswer, AcceptsExactlyWhatAStrictJsonParserAccepts) {
  const std::vector<std::string> pieces = {
      "a", " ", "<|im_start|>", "\\n", "\\\"", "\\\\", "\\/", "\\b", "\\f", "\\r", "\\t", "\\u0041", "\\u00e9",
      "\\uD83D", "\\uDE00", "\\ud83d\\ude00", "\\u12", "\\x", "\\", "\x01", "\x1F", "\x7F", "\xC3\xA9", "\xC3",
      "\xA9", "\xE2\x9C\x93", "\xE2\x9C", "\xF0\x9F\x98\x80", "\xF0\x9F", "\xED\xA0\x80", "\xEF\xBF\xBF", "\xC1\xBF",
      "\xF4\x8F\xBF\xBF", "\xF4\x90\x80\x80", "\xFE"};
  std::mt19937_64 rng(20260912);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string content;
    const size_t n = rng() % 6;
    for (size_t k = 0; k < n; ++k) content += pieces[rng() % pieces.size()];
    const std::string body = "{\"prompt\":\"" + content + "\"}";
    std::string_view prompt;
    std::string error;
    const bool ours = parseApplyTemplateAnswer(body, prompt, error);
    const json doc = json::parse(body, nullptr, false);
    const bool theirs = !doc.is_discarded();
    ASSERT_EQ(ours, theirs) << "content: " << json(content).dump(-1, ' ', true, json::error_handler_t::replace);
    if (!ours) {
      ++refused;
      continue;
    }
    ++accepted;
    ASSERT_EQ(json::parse(buildLlamaCppTokenizeBody("m", prompt))["content"], doc["prompt"]);
  }
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(refused, 1000);
}

// ---- each dialect's /tokenize answer ----

// Ensures llama.cpp's answer ({"tokens"} alone, no count) parses, a count it may add is still checked, and its ids
// are as strict as vLLM's.
TEST(TokenizeAnswerDialects, LlamaCppHasNoCount) {
  TokenizeAnswer out;
  std::string error;
  ASSERT_TRUE(parseTokenizeAnswer(R"({"tokens":[1,15043,4294967295]})", out, error, EngineKind::kLlamaCpp)) << error;
  EXPECT_EQ(out.tokens, (std::vector<uint32_t>{1, 15043, 4294967295u}));
  EXPECT_EQ(out.max_model_len, 0u);
  ASSERT_TRUE(parseTokenizeAnswer(R"({"tokens":[]})", out, error, EngineKind::kLlamaCpp)) << error;
  EXPECT_TRUE(out.tokens.empty());
  for (const char* bad : {R"({})", R"({"tokens":[1],"count":2})", R"({"tokens":[-1]})", R"({"tokens":[1.0]})",
                          R"({"tokens":[{"id":1,"piece":"a"}]})", R"({"tokens":[1]} x)",
                          R"({"tokens":[1],"tokens":[1]})", R"({"content":"hi"})"}) {
    EXPECT_FALSE(parseTokenizeAnswer(bad, out, error, EngineKind::kLlamaCpp)) << bad;
    EXPECT_FALSE(error.empty());
  }
}

// Ensures vLLM (and an engine not known yet) still needs its count: llama.cpp's answer, or the empty list llama.cpp
// gives a vLLM body, is refused rather than taken as a prompt of no tokens.
TEST(TokenizeAnswerDialects, VllmStillNeedsTheCount) {
  TokenizeAnswer out;
  std::string error;
  for (EngineKind kind : {EngineKind::kVllm, EngineKind::kAuto}) {
    EXPECT_FALSE(parseTokenizeAnswer(R"({"tokens":[]})", out, error, kind));
    EXPECT_NE(error.find("count"), std::string::npos) << error;
    EXPECT_FALSE(parseTokenizeAnswer(R"({"count":1,"max_model_len":-1,"tokens":[1]})", out, error, kind));
  }
}

// Ensures SGLang's answer parses with max_model_len as any integer (the tokenizer's model_max_length: -1 when unset,
// or a huge placeholder), read as 0 outside 0..4294967295, while count and ids stay strict.
TEST(TokenizeAnswerDialects, SglangMaxModelLenIsAnyInteger) {
  TokenizeAnswer out;
  std::string error;
  ASSERT_TRUE(parseTokenizeAnswer(R"({"tokens":[5,6],"count":2,"max_model_len":131072})", out, error,
                                  EngineKind::kSglang))
      << error;
  EXPECT_EQ(out.tokens, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(out.max_model_len, 131072u);
  for (const char* max_len : {"-1", "1000000000000000019884624838656", "4294967296", "-0"}) {
    const std::string body = std::string(R"({"tokens":[5],"count":1,"max_model_len":)") + max_len + "}";
    ASSERT_TRUE(parseTokenizeAnswer(body, out, error, EngineKind::kSglang)) << body << ": " << error;
    EXPECT_EQ(out.max_model_len, 0u) << body;
  }
  for (const char* bad : {R"({"tokens":[5],"max_model_len":8})",
                          R"({"tokens":[5],"count":1,"max_model_len":1.5})",
                          R"({"tokens":[5],"count":1,"max_model_len":"8k"})",
                          R"({"tokens":[5],"count":1,"max_model_len":-})",
                          R"({"tokens":[5],"count":1,"max_model_len":01})",
                          R"({"tokens":[[5]],"count":[1],"max_model_len":8})",
                          R"({"tokens":[5],"count":-1,"max_model_len":8})"}) {
    EXPECT_FALSE(parseTokenizeAnswer(bad, out, error, EngineKind::kSglang)) << bad;
    EXPECT_FALSE(error.empty());
  }
}

// ---- the pod order ----

std::vector<TokenizerPod> pods(std::vector<std::pair<EngineKind, int32_t>> kinds_and_loads) {
  std::vector<TokenizerPod> out;
  for (size_t i = 0; i < kinds_and_loads.size(); ++i)
    out.push_back({static_cast<uint32_t>(i + 1), "p" + std::to_string(i + 1), "127.0.0.1", 1,
                   kinds_and_loads[i].second, kinds_and_loads[i].first});
  return out;
}

std::vector<uint32_t> idsOf(const std::vector<TokenizerPod>& pods) {
  std::vector<uint32_t> out;
  for (const auto& p : pods) out.push_back(p.id);
  return out;
}

// Ensures a chat request among mixed pods asks a pod that can (vLLM, llama.cpp) before SGLang however loaded,
// known dialects before pods not recognised yet, and says how many can be asked.
// Ensures a /tokenize answer is accepted only when any JSON parser would accept it, in the parts the gateway skips
// too (found by the engine_answer fuzz target: an invalid escape in an unknown key, numbers JSON does not allow).
TEST(TokenizeAnswerDialects, RejectsWhatNoJsonParserAccepts) {
  TokenizeAnswer out;
  std::string error;
  for (const char* body : {R"({"count":1,"max_mode\ul_len":8,"tokens":[1]})", R"({"count":1,"x":"\ud800","tokens":[1]})",
                           R"({"count":1,"x":+1,"tokens":[1]})", R"({"count":1,"x":1-2,"tokens":[1]})",
                           R"({"count":1,"x":01,"tokens":[1]})", R"({"count":1,"x":1.,"tokens":[1]})",
                           R"({"count":1,"x":.5,"tokens":[1]})", "{\"count\":1,\"x\":\"\xff\",\"tokens\":[1]}"}) {
    EXPECT_FALSE(parseTokenizeAnswer(body, out, error)) << body;
  }
  EXPECT_TRUE(parseTokenizeAnswer(R"({"count":1,"x":[-0.5e+3,"\u00e9",true,null,{}],"tokens":[1]})", out, error))
      << error;
}

TEST(TokenizerPodOrder, PodsThatCanComeFirst) {
  auto mixed = pods({{EngineKind::kSglang, 0}, {EngineKind::kAuto, 0}, {EngineKind::kVllm, 7},
                     {EngineKind::kLlamaCpp, 3}, {EngineKind::kSglang, 1}});
  EXPECT_EQ(orderTokenizerPods(mixed, kChat, 0), 3u);
  EXPECT_EQ(idsOf(mixed), (std::vector<uint32_t>{4, 3, 2, 1, 5}));
  // A completion with a string prompt: every dialect can; the known ones first, by load.
  mixed = pods({{EngineKind::kSglang, 0}, {EngineKind::kAuto, 0}, {EngineKind::kVllm, 7}, {EngineKind::kLlamaCpp, 3}});
  EXPECT_EQ(orderTokenizerPods(mixed, kStringPrompt, 0), 4u);
  EXPECT_EQ(idsOf(mixed), (std::vector<uint32_t>{1, 4, 3, 2}));
}

// Ensures a fleet of one dialect is ordered exactly as before (least loaded first, ties rotating), and one that
// cannot tokenize the request has no pod to ask.
TEST(TokenizerPodOrder, OneDialectAsBefore) {
  for (EngineKind kind : {EngineKind::kVllm, EngineKind::kAuto, EngineKind::kLlamaCpp}) {
    std::map<uint32_t, int> firsts;
    for (uint64_t rotation = 0; rotation < 30; ++rotation) {
      auto same = pods({{kind, 0}, {kind, 4}, {kind, 0}, {kind, 0}});
      EXPECT_EQ(orderTokenizerPods(same, kChat, rotation), 4u);
      ++firsts[same[0].id];
      EXPECT_EQ(same[3].id, 2u);
    }
    EXPECT_EQ(firsts, (std::map<uint32_t, int>{{1, 10}, {3, 10}, {4, 10}}));
  }
  auto sglang = pods({{EngineKind::kSglang, 2}, {EngineKind::kSglang, 0}});
  EXPECT_EQ(orderTokenizerPods(sglang, kChat, 0), 0u);
  EXPECT_EQ(idsOf(sglang), (std::vector<uint32_t>{2, 1}));
  std::vector<TokenizerPod> none;
  EXPECT_EQ(orderTokenizerPods(none, kChat, 0), 0u);
}

// Ensures ties rotate within each group of a mixed fleet, so the pods that can take turns.
TEST(TokenizerPodOrder, TiesRotateWithinAGroup) {
  std::map<uint32_t, int> firsts;
  for (uint64_t rotation = 0; rotation < 20; ++rotation) {
    auto mixed = pods({{EngineKind::kSglang, 0}, {EngineKind::kVllm, 1}, {EngineKind::kLlamaCpp, 1}});
    EXPECT_EQ(orderTokenizerPods(mixed, kChat, rotation), 2u);
    ++firsts[mixed[0].id];
    EXPECT_EQ(mixed[2].id, 1u);
  }
  EXPECT_EQ(firsts, (std::map<uint32_t, int>{{2, 10}, {3, 10}}));
}

}  // namespace
}  // namespace prefixgate::tokenize
