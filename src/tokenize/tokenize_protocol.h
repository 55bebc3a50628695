#pragma once
// The engine's POST /tokenize as pure functions (vLLM's shape, see shared/reference/vllm-interfaces.md): the body
// the remote tokenizer sends, the answer it accepts, the key it caches the answer under, and the order it tries
// pods in. No sockets: RemoteTokenizer does the I/O around them.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

// The /tokenize body. Chat: {"model", "messages", "tools"? , "add_generation_prompt": true,
// "add_special_tokens": false}; completion: {"model", "prompt", "add_special_tokens": true}.
std::string buildTokenizeBody(const TokenizeInput& input);

// A 64-bit key for the answer: XXH64 over the form, the model and the raw JSON fields, each field hashed on its own
// (chained seeds), so moving text from one field to the next changes the key.
uint64_t tokenizeCacheKey(const TokenizeInput& input);

struct TokenizeAnswer {
  std::vector<uint32_t> tokens;
  uint32_t max_model_len = 0;  // 0 when the engine did not say
};

// Parses {"count": N, "max_model_len": M, "tokens": [ids...]} (other fields are skipped). Rejects anything else:
// not a JSON object, trailing bytes, a missing or repeated "count"/"tokens", a count other than the number of
// tokens, and any id or number that is not a whole number from 0 to 4294967295 (no sign, fraction or exponent).
// Returns false with `error` set; `out` is then unspecified.
bool parseTokenizeAnswer(std::string_view body, TokenizeAnswer& out, std::string& error);

// A pod that can tokenize for the request's model, as the caller's pod list describes it.
struct TokenizerPod {
  uint32_t id = 0;       // the pod's id (keys pooled connections)
  std::string name;      // for logs
  std::string host;
  uint16_t port = 0;
  int32_t load = 0;      // requests in flight to it now
};

// Orders `pods` by load (fewest in flight first); the least-loaded ones, when several, are rotated by `rotation` so
// that successive calls (rotation + 1 each) start at different pods instead of all landing on the first one.
void orderTokenizerPods(std::vector<TokenizerPod>& pods, uint64_t rotation);

}  // namespace prefixgate::tokenize
