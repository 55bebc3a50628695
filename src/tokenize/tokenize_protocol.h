#pragma once
// The engines' tokenize protocols as pure functions, one dialect per engine (engine::EngineKind): the bodies the
// remote tokenizer sends, the answers it accepts, the key it caches the answer under, and the order it tries pods
// in. No sockets: RemoteTokenizer does the I/O around them.
//   vLLM      POST /tokenize {"model", "messages" | "prompt", ...} -> {"count", "max_model_len", "tokens"}
//   SGLang    POST /tokenize {"model", "prompt", "add_special_tokens"} -> {"tokens", "count", "max_model_len"};
//             no chat form: a chat request cannot be tokenized there
//   llama.cpp chat: POST /apply-template {"model", "messages", "tools"?} -> {"prompt"}, then POST /tokenize
//             {"model", "content": that prompt, "add_special": true, "parse_special": true} -> {"tokens"}; completion:
//             that /tokenize with the client's prompt as content
// A pod whose dialect is not known yet (kAuto) is spoken to as vLLM (spokenDialect).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine_kind.h"

namespace prefixgate::tokenize {

// What one request asks the engine to tokenize: views of the request body's own JSON text, so the engine templates
// exactly what it will template for the real request. The views must outlive the call that takes them.
struct TokenizeInput {
  std::string_view model;
  bool chat = false;           // chat form (messages, tools) or completion form (prompt)
  std::string_view messages;   // chat: the raw JSON array
  std::string_view tools;      // chat: the raw JSON array, "" when the request has none
  std::string_view prompt;     // completion form: the raw JSON string or array
};

// The dialect the tokenizer speaks to a pod of `kind`: its own; vLLM's while it is not known (kAuto), as before
// pods had dialects.
constexpr engine::EngineKind spokenDialect(engine::EngineKind kind) {
  return kind == engine::EngineKind::kAuto ? engine::EngineKind::kVllm : kind;
}

// Why a pod of `dialect` cannot tokenize `input` as its engine will tokenize the real request, or "" when it can:
// SGLang's /tokenize has no chat form; a list of prompts is several sequences to SGLang and llama.cpp (SGLang
// answers a list of lists, llama.cpp's /tokenize would join them into one), so only a JSON string prompt is sent
// there. vLLM (and kAuto) is asked everything, as before.
std::string_view unsupportedReason(engine::EngineKind dialect, const TokenizeInput& input);

// The /tokenize body in `dialect` (kAuto: vLLM's). vLLM: chat {"model", "messages", "tools"?,
// "add_generation_prompt": true, "add_special_tokens": false}, completion {"model", "prompt",
// "add_special_tokens": true}; SGLang: that completion form; llama.cpp: buildLlamaCppTokenizeBody with the prompt.
// Preconditions: unsupportedReason(dialect, input) is "", and not needsApplyTemplate(dialect, input).
std::string buildTokenizeBody(const TokenizeInput& input, engine::EngineKind dialect = engine::EngineKind::kVllm);

// llama.cpp's chat is two exchanges: the template first (its /tokenize has no chat form), then /tokenize.
constexpr bool needsApplyTemplate(engine::EngineKind dialect, const TokenizeInput& input) {
  return dialect == engine::EngineKind::kLlamaCpp && input.chat;
}
// llama.cpp's POST /apply-template body: {"model", "messages", "tools"?}, the request's own JSON (the server runs
// the same oaicompat_chat_params_parse as for the chat request; "model" picks the model in its router mode).
std::string buildApplyTemplateBody(const TokenizeInput& input);
// llama.cpp's POST /tokenize body: {"model", "content": `content`, "add_special": true, "parse_special": true},
// the flags its completion endpoints tokenize a prompt with. `content`: a JSON string literal, quotes included
// (the client's prompt, or the templated prompt from parseApplyTemplateAnswer), copied as it is.
std::string buildLlamaCppTokenizeBody(std::string_view model, std::string_view content);

// Parses llama.cpp's /apply-template answer, an object with a "prompt" string (other fields skipped). `prompt` is
// set to that string's JSON literal in `body` (a view into it, quotes included), checked as strictly as a JSON
// parser decodes it: escapes (\uXXXX surrogates paired), no raw control characters, well-formed UTF-8. Passing the
// literal on instead of decoding and re-encoding it costs no copy, and the engine decodes it back to exactly the
// text it rendered. Rejects anything else (not an object, trailing bytes, "prompt" missing, repeated or not a
// string); returns false with `error` set.
bool parseApplyTemplateAnswer(std::string_view body, std::string_view& prompt, std::string& error);

// A 64-bit key for the answer: XXH64 over the form, the model and the raw JSON fields, each field hashed on its own
// (chained seeds), so moving text from one field to the next changes the key. The dialect of the pod that answers
// is not in it: the cache is looked up before any pod is chosen (a hit costs no pod lookup), in the usual fleet
// all of a model's pods speak one dialect anyway, and in a fleet mixing engines under one model name the first
// answer then stands for the request whichever pod is asked next, so identical prompts hash identically instead of
// alternating between two tokenizations as the pods take turns.
uint64_t tokenizeCacheKey(const TokenizeInput& input);

struct TokenizeAnswer {
  std::vector<uint32_t> tokens;
  uint32_t max_model_len = 0;  // 0 when the engine did not say
};

// Parses a /tokenize answer of `dialect` (kAuto: vLLM's): {"count": N, "max_model_len": M, "tokens": [ids...]},
// other fields skipped. Rejects anything else: not a JSON object, trailing bytes, a missing or repeated
// "count"/"tokens", a count other than the number of tokens, and any id or number that is not a whole number from 0
// to 4294967295 (no sign, fraction or exponent). Per dialect: llama.cpp sends no "count" (checked when present);
// SGLang's "max_model_len" is any integer (the tokenizer's model_max_length, -1 when unset): one outside 0 to
// 4294967295 reads as 0. Returns false with `error` set; `out` is then unspecified.
bool parseTokenizeAnswer(std::string_view body, TokenizeAnswer& out, std::string& error,
                         engine::EngineKind dialect = engine::EngineKind::kVllm);

// A pod that can tokenize for the request's model, as the caller's pod list describes it.
struct TokenizerPod {
  uint32_t id = 0;       // the pod's id (keys pooled connections)
  std::string name;      // for logs
  std::string host;
  uint16_t port = 0;
  int32_t load = 0;      // requests in flight to it now
  engine::EngineKind engine = engine::EngineKind::kAuto;  // its dialect (PodState::engineKind); kAuto: not known
};

// Orders `pods` by load (fewest in flight first); the least-loaded ones, when several, are rotated by `rotation` so
// that successive calls (rotation + 1 each) start at different pods instead of all landing on the first one.
void orderTokenizerPods(std::vector<TokenizerPod>& pods, uint64_t rotation);

// Orders `pods` for `input`: first those whose known dialect can tokenize it, then those whose dialect is not known
// yet (kAuto, spoken to as vLLM: a guess), then those that cannot (unsupportedReason), each group as above. Returns
// how many can be asked (the first two groups).
size_t orderTokenizerPods(std::vector<TokenizerPod>& pods, const TokenizeInput& input, uint64_t rotation);

}  // namespace prefixgate::tokenize
