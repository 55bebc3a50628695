#pragma once
// The OpenAI-compatible response bodies the simulator sends, shaped as vLLM shapes them (pure JSON builders).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace prefixgate::sim {

// kMessages: Anthropic's /v1/messages (its answers are anthropic_json.h's).
enum class Endpoint { kChat, kCompletion, kMessages };

// What every response and chunk of one request repeats.
struct CompletionMeta {
  Endpoint endpoint = Endpoint::kChat;
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
};

struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
};

// One request's timings as llama-server reports them (server_slot_stats), in simulated milliseconds.
struct Timings {
  uint32_t cache_n = 0;      // prompt tokens found in the prefix cache
  uint32_t prompt_n = 0;     // prompt tokens processed (not cached)
  double prompt_ms = 0;      // from its first scheduling to its first token
  uint32_t predicted_n = 0;  // output tokens
  double predicted_ms = 0;   // from its first token to its last
};

inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// The error "type" vLLM uses for an HTTP status ("BadRequestError", "NotFoundError", ...).
std::string errorType(int status);
// {"error": {"message", "type", "param": null, "code": status}}.
nlohmann::json errorJson(int status, std::string_view message);

nlohmann::json usageJson(const Usage& usage);

// A whole (non-streamed) chat.completion or text_completion.
nlohmann::json completionResponse(const CompletionMeta& meta, const std::string& text, std::string_view finish_reason,
                                  const Usage& usage);

// One streamed chunk carrying one token's text; the first chat chunk also carries role "assistant".
nlohmann::json tokenChunk(const CompletionMeta& meta, const std::string& text, bool first);
// The chunk that ends the choice: empty delta/text and finish_reason.
nlohmann::json finishChunk(const CompletionMeta& meta, std::string_view finish_reason);
// The stream_options.include_usage chunk: empty choices and usage.
nlohmann::json usageChunk(const CompletionMeta& meta, const Usage& usage);

// "data: <json>\n\n".
std::string sseEvent(const nlohmann::json& chunk);

nlohmann::json modelsList(const std::vector<std::string>& models, int64_t created, uint32_t max_model_len);

nlohmann::json embeddingsResponse(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                                  uint64_t prompt_tokens);

}  // namespace prefixgate::sim
