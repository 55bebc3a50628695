// libFuzzer target for a request body: openai::parseRequest for every endpoint (rerank, score, Anthropic's messages and
// the Responses API too) with include_tools both ways, then
// what routing builds from the parsed view: the prefix strategies' tokenized prompt and its block hashes (as
// routing::PrefixServices::hashPrompt does with the character tokenizer) and the remote tokenizer's /tokenize body
// and cache key. Nothing may crash, leak or trip a sanitizer, and the parser's contract holds (checked below).
// Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "fuzz_input.h"
#include "index/block_hash.h"
#include "openai/request.h"
#include "openai/responses_request.h"
#include "tokenize/tokenize_protocol.h"
#include "tokenize/tokenizer.h"

namespace {

using namespace prefixgate;
using prefixgate::fuzz::check;

const config::Config kConfig;
constexpr uint64_t kHashSeed = 1;

// Whether `part` lies inside `whole` (the raw views must point into the body).
bool within(std::string_view part, const std::string& whole) {
  return part.empty() || (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void buildPrompt(const openai::RequestView& view, const std::string& body, bool body_is_json) {
  // The prefix strategies' prompt bytes and block hashes.
  static const tokenize::CharacterTokenizer tokenizer;
  std::vector<uint8_t> scratch;
  std::span<const uint8_t> bytes;
  if (view.has_token_ids) {
    tokenize::packTokenIds(view.prompt_token_ids, scratch);
    bytes = scratch;
    check(bytes.size() == view.prompt_token_ids.size() * tokenize::kTokenIdBytes);
  } else {
    bytes = tokenizer.encodeView(view.prompt_text, scratch);
    check(tokenizer.tokenCount(bytes) == view.prompt_text.size());
  }
  const uint32_t block = kConfig.routing.prefix_cache.block_size;
  std::vector<BlockHash> hashes;
  index::hashBlocks(bytes, block, kHashSeed, hashes);
  check(hashes.size() == bytes.size() / block);

  // Rerank and score are routed by load: never hashed for routing nor sent to the remote tokenizer.
  if (view.endpoint == openai::Endpoint::kRerank || view.endpoint == openai::Endpoint::kScore) {
    check(!view.prompt_text.empty() && view.raw_messages.empty() && view.raw_prompt.empty());
    return;
  }
  // Anthropic's messages are never sent to the remote tokenizer (its body takes OpenAI's messages).
  if (openai::isAnthropic(view.endpoint)) {
    check(!view.raw_messages.empty() && within(view.raw_messages, body) && within(view.raw_tools, body));
    return;
  }
  // Nor are the Responses API's items (its `input` may be absent: a request continuing a stored response).
  if (view.endpoint == openai::Endpoint::kResponses) {
    check(within(view.raw_messages, body) && within(view.raw_tools, body));
    check(view.previous_response_id.empty() || openai::validResponseId(view.previous_response_id));
    return;
  }
  // The remote tokenizer's request, built from the body's own JSON text.
  check(within(view.raw_messages, body) && within(view.raw_tools, body) && within(view.raw_prompt, body));
  const tokenize::TokenizeInput input{view.model, view.endpoint == openai::Endpoint::kChatCompletions,
                                      view.raw_messages, view.raw_tools, view.raw_prompt};
  const std::string tokenize_body = tokenize::buildTokenizeBody(input);
  (void)tokenize::tokenizeCacheKey(input);
  // Pieces of a valid body make a valid /tokenize body (the engine would otherwise refuse every such prompt).
  if (body_is_json) check(nlohmann::json::accept(tokenize_body));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool body_is_json = nlohmann::json::accept(text);
  using openai::Endpoint;
  for (auto endpoint : {Endpoint::kChatCompletions, Endpoint::kCompletions, Endpoint::kEmbeddings, Endpoint::kRerank,
                        Endpoint::kScore, Endpoint::kMessages, Endpoint::kMessagesCountTokens, openai::Endpoint::kResponses}) {
    std::string with_tools_body(text), without_tools_body(text);
    openai::RequestView with_tools, without_tools;
    const uint32_t depth = kConfig.limits.max_json_depth;
    auto error = openai::parseRequest(endpoint, with_tools_body, true, depth, with_tools);
    auto error_without = openai::parseRequest(endpoint, without_tools_body, false, depth, without_tools);
    // include_tools changes the prompt, never whether the body is accepted.
    check(error.status == error_without.status && error.message == error_without.message);
    if (error) {
      check(error.status == 400 && !error.message.empty());
      continue;
    }
    check(!with_tools.model.empty() && with_tools.model == without_tools.model);
    check(!with_tools.has_token_ids || with_tools.prompt_text.empty());
    // Tools go in front of the messages: the prompt without them is the end of the prompt with them.
    check(with_tools.prompt_text.ends_with(without_tools.prompt_text));
    buildPrompt(with_tools, with_tools_body, body_is_json);
    buildPrompt(without_tools, without_tools_body, body_is_json);
  }
  return 0;
}
