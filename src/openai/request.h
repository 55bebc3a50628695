#pragma once
// Parsing an OpenAI-compatible request body once, with simdjson on-demand, into what routing needs.
// The body itself is passed to the engine unchanged.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::openai {

enum class Endpoint { kChatCompletions, kCompletions, kEmbeddings };
std::string_view endpointName(Endpoint e);  // "chat", "completions", "embeddings"

struct RequestView {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // The text whose prefix is matched: chat = tools JSON (when present and asked for) then every message's
  // content, joined by one space; completions = the prompt (a list of strings joined by one space).
  std::string prompt_text;
  // Completions given token ids (`prompt: [1, 2, 3]`): used as tokens directly instead of prompt_text.
  std::vector<uint32_t> prompt_token_ids;
  bool has_token_ids = false;
};

struct ParseError {
  int status = 0;  // 0 = no error
  std::string message;
  std::string param;  // the offending field, "" when none
  explicit operator bool() const { return status != 0; }
};

// Bytes of slack simdjson needs after the body; reserve them before reading a body into a string.
size_t paddingBytes();

// Parses `body` (whose capacity should exceed its size by paddingBytes(); if not, it is grown once).
// include_tools: put the chat request's `tools` in front of the message text.
ParseError parseRequest(Endpoint endpoint, std::string& body, bool include_tools, RequestView& out);

}  // namespace prefixgate::openai
