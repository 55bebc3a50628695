#pragma once
// The HTTP API as pure functions from a request body to a response (no sockets): validation of the OpenAI
// requests (400 / 404 answers in OpenAI's error shape), and the endpoints that answer at once (/tokenize,
// /v1/models, /sim/fault). The server only does the I/O around them.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine_sim/kv_transfer.h"
#include "engine_sim/openai_json.h"
#include "engine_sim/prompt.h"
#include "engine_sim/sim_config.h"

namespace prefixgate::sim {

struct SimpleResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers = {};  // more header fields (name, value)
};

// Injected faults (POST /sim/fault).
struct Faults {
  int health_status = 200;  // what GET /health answers
  // These two apply to every inference endpoint alike (chat, completions, messages and count_tokens, embeddings,
  // responses, rerank, score: server.cpp's faultFirst), before its body is read; a stall wins.
  int error_status = 0;     // non-zero: every inference request gets this status
  bool stall = false;       // accept inference requests and never answer them (until the client leaves)
  int tokenize_status = 0;  // non-zero: POST /tokenize gets this status
  uint32_t tokenize_delay_ms = 0;  // POST /tokenize answers after this long (real milliseconds, not time-scaled)
};

// A validated /v1/chat/completions, /v1/completions or /v1/messages request.
struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  Prompt prompt;
  uint32_t max_tokens = 0;
  // "length" when the client set max_tokens (generation stops at the limit), else "stop" (the simulated model
  // ends on its own after max_tokens_default tokens).
  std::string finish_reason;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  KvTransferParams kv_transfer;  // kv_transfer_params (vllm dialect only)
  std::string cache_salt;        // cache_salt (vllm dialect only): the prompt's cache namespace
};

struct EmbeddingRequest {
  std::string model;
  std::vector<Prompt> inputs;
};

// A parse either yields the request (status 0) or the error answer to send.
template <class Request>
struct Parsed {
  Request request;
  int status = 0;
  std::string error;
  bool ok() const { return status == 0; }
};

// An OpenAI-shaped error response.
SimpleResponse errorResponse(int status, std::string_view message);

// Checks a parsed body (discarded = malformed JSON: 400) is an object and reads its "model": absent or null means the
// first served model, one not served is a 404. Returns the error status (with `error`) or 0.
int checkModel(const SimConfig& config, const nlohmann::json& body, std::string& model, std::string& error);

// Validates a chat or completion body: JSON, model served, prompt, max_tokens (max_completion_tokens for chat),
// stream, stream_options, prompt + max_tokens within max_model_len, and (vllm dialect) kv_transfer_params: well
// typed, no hand-off with the slots model, and a decode leg's remote_block_ids as many as its prompt's blocks.
Parsed<CompletionRequest> parseCompletionRequest(const SimConfig& config, Endpoint endpoint, std::string_view body);
Parsed<EmbeddingRequest> parseEmbeddingRequest(const SimConfig& config, std::string_view body);

// POST /tokenize, completion form {"model", "prompt"} or chat form {"model", "messages", "add_generation_prompt"}.
SimpleResponse handleTokenize(const SimConfig& config, std::string_view body);
// POST /v1/messages/count_tokens (Anthropic's): {"input_tokens": N} for the prompt a Messages body would have;
// errors in Anthropic's shape.
SimpleResponse handleCountTokens(const SimConfig& config, std::string_view body);
// What the engine says about a prompt for POST /sim/cache/match: its cached prefix now, and the pod's load.
struct CacheMatch {
  uint64_t cached_tokens = 0;
  size_t num_requests_running = 0;
  size_t num_requests_waiting = 0;
  double kv_cache_usage = 0;
};
// POST /sim/cache/match: the prompt of a chat body ("messages", "tools"), a completion body ("prompt") or
// {"token_ids": [...]}, tokenized as the engine of `dialect` does; answers {"cached_tokens", "prompt_tokens",
// "num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"} from `lookup` (which must only read).
SimpleResponse handleCacheMatch(std::string_view body,
                                const std::function<CacheMatch(std::span<const uint32_t>)>& lookup,
                                EngineDialect dialect = EngineDialect::kVllm);
// GET /sim/info: {"name", "role", "engine_id", "engine_dialect", "kv_cache_model", "block_size",
// "kv_transfer_ms_per_1k_tokens"}.
SimpleResponse handleSimInfo(const SimConfig& config);
// GET /v1/models.
SimpleResponse handleModels(const SimConfig& config, int64_t created);
// POST /sim/fault: applies the fields present ({"health_status", "error_status", "stall", "tokenize_status",
// "tokenize_delay_ms"}); answers the faults now in force.
SimpleResponse handleFault(Faults& faults, std::string_view body);
SimpleResponse faultsResponse(const Faults& faults);

}  // namespace prefixgate::sim
