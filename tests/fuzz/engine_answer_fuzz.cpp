// libFuzzer target for what an engine answers the remote tokenizer (an engine's bytes are as hostile as a
// client's): /tokenize answers in every dialect (tokenize::parseTokenizeAnswer) and llama.cpp's /apply-template
// answer (tokenize::parseApplyTemplateAnswer), whose prompt literal is passed on to /tokenize undecoded. Nothing may
// crash, leak or trip a sanitizer; an accepted /tokenize answer is valid JSON whose "tokens" are exactly the ids
// read; an accepted template literal is a JSON string as a JSON parser decodes it, and the /tokenize body built
// from it is valid JSON carrying that same string. Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_input.h"
#include "tokenize/tokenize_protocol.h"

namespace {
using namespace prefixgate;
using prefixgate::fuzz::check;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(body);
  } catch (const nlohmann::json::out_of_range&) {
    // A number beyond a double's range (7777E735096) is valid JSON that nlohmann refuses: it cannot judge the answer.
    return 0;
  } catch (const nlohmann::json::exception&) {
    parsed = nlohmann::json(nlohmann::json::value_t::discarded);
  }
  for (engine::EngineKind dialect :
       {engine::EngineKind::kVllm, engine::EngineKind::kSglang, engine::EngineKind::kLlamaCpp}) {
    tokenize::TokenizeAnswer answer;
    std::string error;
    if (!tokenize::parseTokenizeAnswer(body, answer, error, dialect)) {
      check(!error.empty());
      continue;
    }
    // Accepted: the JSON parser agrees on the ids (a duplicate key would make them disagree).
    check(!parsed.is_discarded() && parsed.is_object() && parsed.contains("tokens"));
    const nlohmann::json& tokens = parsed["tokens"];
    check(tokens.is_array() && tokens.size() == answer.tokens.size());
    for (size_t i = 0; i < answer.tokens.size(); ++i)
      check(tokens[i].is_number_unsigned() && tokens[i].get<uint64_t>() == answer.tokens[i]);
  }
  std::string_view prompt;
  std::string error;
  if (tokenize::parseApplyTemplateAnswer(body, prompt, error)) {
    const nlohmann::json literal = nlohmann::json::parse(prompt, nullptr, false);
    check(!literal.is_discarded() && literal.is_string());
    const nlohmann::json tokenize_body =
        nlohmann::json::parse(tokenize::buildLlamaCppTokenizeBody("model", prompt), nullptr, false);
    check(!tokenize_body.is_discarded() && tokenize_body["content"] == literal);
    check(!parsed.is_discarded() && parsed["prompt"] == literal);
  } else {
    check(!error.empty());
  }
  return 0;
}
