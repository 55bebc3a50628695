#pragma once
// Turns an OpenAI request body into the prompt the simulated model sees (pure). Chat messages go through a tiny
// stand-in for a chat template, "<|role|>content<|end|>" per message (markers are special tokens), so requests
// that share leading messages share a token prefix; completion prompts are text (or lists of text, concatenated)
// or token ids used as is.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine_sim/engine_dialect.h"

namespace prefixgate::sim {

struct Prompt {
  std::string text;              // the prompt text; empty for a token-id prompt
  std::vector<uint32_t> tokens;  // its token ids
};

// An extraction either fills `prompt`/`prompts` or says what is wrong in `error` (for a 400 answer).
struct PromptResult {
  Prompt prompt;
  std::string error;
  bool ok() const { return error.empty(); }
};

struct PromptsResult {
  std::vector<Prompt> prompts;
  std::string error;
  bool ok() const { return error.empty(); }
};

inline constexpr const char* kGenerationPrompt = "<|assistant|>";

// The chat template of `messages` (an array of {role, content}); `tools`, when an array, comes first: the text
// "<|role|>content<|end|>" per message (then "<|assistant|>") and its tokens, where every marker is one special
// token and each message's content is tokenized on its own. Content is a string, null, or an array of parts whose
// "text" fields are concatenated. Returns false and sets error on a malformed message.
bool chatTemplate(const nlohmann::json& messages, const nlohmann::json* tools, bool add_generation_prompt,
                  Prompt& prompt, std::string& error);

// The prompt of a /v1/chat/completions (or chat-form /tokenize) body: its messages and tools.
PromptResult chatPrompt(const nlohmann::json& body, bool add_generation_prompt);

// The prompt of a /v1/completions (or completion-form /tokenize) body: "prompt" as a string, a list of strings
// (concatenated), a list of token ids, or a list of such lists (concatenated).
PromptResult completionPrompt(const nlohmann::json& body);

// The same as the engine of `dialect` tokenizes them. vllm and sglang: as above. llamacpp (llama-server renders
// the chat template to text, then tokenizes that text with add_special and parse_special): the template's text,
// or a completion's text, through tokenizeSpecial(text, true, true) (a BOS token, then markers as special tokens:
// the same ids as above, after the BOS, whenever every role is a valid marker name); token-id prompts as they are.
PromptResult chatPrompt(const nlohmann::json& body, bool add_generation_prompt, EngineDialect dialect);
PromptResult completionPrompt(const nlohmann::json& body, EngineDialect dialect);

// llama-server's add_generation_prompt of a chat body (and of /apply-template): the field when it is a boolean,
// else true (its json_value falls back to the default on a wrong type).
bool llamacppAddGenerationPrompt(const nlohmann::json& body);

// The inputs of a /v1/embeddings body: "input" as a string, token ids, or a list of either; one Prompt each.
PromptsResult embeddingInputs(const nlohmann::json& body);

}  // namespace prefixgate::sim
