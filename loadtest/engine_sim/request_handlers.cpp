#include "engine_sim/request_handlers.h"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine_sim/anthropic_json.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

constexpr int64_t kMaxTokenizeDelayMs = 600000;

json parseBody(std::string_view body) { return json::parse(body.begin(), body.end(), nullptr, false); }

// Reads an optional positive integer field; null counts as absent.
bool readPositive(const json& body, const char* key, uint32_t& value, bool& present, std::string& error) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > UINT32_MAX) {
    error = fmt::format("'{}' must be an integer of at least 1", key);
    return false;
  }
  value = static_cast<uint32_t>(it->get<int64_t>());
  present = true;
  return true;
}

bool readBool(const json& object, const char* key, bool& value, std::string& error) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    error = fmt::format("'{}' must be a boolean", key);
    return false;
  }
  value = it->get<bool>();
  return true;
}

bool readStreamOptions(const json& body, bool& include_usage, std::string& error) {
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_object()) {
    error = "'stream_options' must be an object";
    return false;
  }
  return readBool(*it, "include_usage", include_usage, error);
}

// kv_transfer_params, which only vLLM (with a KV connector) reads: other dialects ignore the field as their engines
// do. Returns false and sets error for a 400.
// cache_salt (vLLM's protocol.py): a string, which vLLM refuses when empty; other dialects ignore the field as
// their engines do.
bool readCacheSalt(const SimConfig& config, const json& body, CompletionRequest& request, std::string& error) {
  if (config.dialect() != EngineDialect::kVllm) return true;
  auto it = body.find("cache_salt");
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    error = "'cache_salt' must be a non-empty string";
    return false;
  }
  request.cache_salt = it->get<std::string>();
  return true;
}

bool readKvTransfer(const SimConfig& config, const json& body, CompletionRequest& request, std::string& error) {
  if (config.dialect() != EngineDialect::kVllm) return true;
  KvTransferParse parse = parseKvTransferParams(body);
  if (!parse.ok()) {
    error = parse.error;
    return false;
  }
  KvTransferParams& params = parse.params;
  if (params.leg != KvTransfer::kNone && config.kvCacheModel() != KvCacheModel::kPaged) {
    error = "'kv_transfer_params': this engine has no KV connector (--kv-cache-model slots); do_remote_decode and "
            "do_remote_prefill need the paged model";
    return false;
  }
  uint64_t blocks = (request.prompt.tokens.size() + config.block_size - 1) / config.block_size;
  if (params.leg == KvTransfer::kReceive && params.remote_blocks != blocks) {
    // The prefill pod hands out the blocks holding the whole prompt; another count means another prompt.
    error = fmt::format("'kv_transfer_params.remote_block_ids' has {} blocks, but this prompt of {} tokens fills {} "
                        "blocks of {}",
                        params.remote_blocks, request.prompt.tokens.size(), blocks, config.block_size);
    return false;
  }
  request.kv_transfer = params;
  return true;
}

}  // namespace

int checkModel(const SimConfig& config, const nlohmann::json& body, std::string& model, std::string& error) {
  if (body.is_discarded()) {
    error = "malformed JSON in the request body";
    return 400;
  }
  if (!body.is_object()) {
    error = "the request body must be a JSON object";
    return 400;
  }
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) {
    model = config.servedModel();
    return 0;
  }
  if (!it->is_string()) {
    error = "'model' must be a string";
    return 400;
  }
  model = it->get<std::string>();
  if (std::find(config.models.begin(), config.models.end(), model) == config.models.end()) {
    error = fmt::format("The model `{}` does not exist.", model);
    return 404;
  }
  return 0;
}

SimpleResponse errorResponse(int status, std::string_view message) {
  return SimpleResponse{status, "application/json", errorJson(status, message).dump()};
}

Parsed<CompletionRequest> parseCompletionRequest(const SimConfig& config, Endpoint endpoint, std::string_view body) {
  Parsed<CompletionRequest> parsed;
  CompletionRequest& request = parsed.request;
  request.endpoint = endpoint;
  json doc = parseBody(body);
  parsed.status = checkModel(config, doc, request.model, parsed.error);
  if (!parsed.ok()) return parsed;
  EngineDialect dialect = config.dialect();
  // llama-server honours add_generation_prompt in a chat request (as in /apply-template); the others' prompts
  // here always end with it.
  bool add_generation_prompt = dialect != EngineDialect::kLlamacpp || llamacppAddGenerationPrompt(doc);
  PromptResult prompt = endpoint == Endpoint::kChat       ? chatPrompt(doc, add_generation_prompt, dialect)
                        : endpoint == Endpoint::kMessages ? anthropicPrompt(doc)
                                                          : completionPrompt(doc, dialect);
  bool present = false;
  request.max_tokens = config.max_tokens_default;
  bool valid = prompt.ok() && readPositive(doc, "max_tokens", request.max_tokens, present, parsed.error) &&
               (endpoint != Endpoint::kChat ||
                readPositive(doc, "max_completion_tokens", request.max_tokens, present, parsed.error)) &&
               readBool(doc, "stream", request.stream, parsed.error) &&
               readStreamOptions(doc, request.include_usage, parsed.error);
  if (!prompt.ok()) parsed.error = prompt.error;
  if (!valid) {
    parsed.status = 400;
    return parsed;
  }
  request.prompt = std::move(prompt.prompt);
  request.finish_reason = present ? "length" : "stop";
  if (!readKvTransfer(config, doc, request, parsed.error) || !readCacheSalt(config, doc, request, parsed.error)) {
    parsed.status = 400;
    return parsed;
  }
  uint64_t total = request.prompt.tokens.size() + uint64_t{request.max_tokens};
  if (total > config.max_model_len) {
    parsed.status = 400;
    parsed.error = fmt::format(
        "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the messages, "
        "{} in the completion). Please reduce the length of the messages or completion.",
        config.max_model_len, total, request.prompt.tokens.size(), request.max_tokens);
  }
  return parsed;
}

Parsed<EmbeddingRequest> parseEmbeddingRequest(const SimConfig& config, std::string_view body) {
  Parsed<EmbeddingRequest> parsed;
  json doc = parseBody(body);
  parsed.status = checkModel(config, doc, parsed.request.model, parsed.error);
  if (!parsed.ok()) return parsed;
  PromptsResult inputs = embeddingInputs(doc);
  if (!inputs.ok()) {
    parsed.status = 400;
    parsed.error = inputs.error;
    return parsed;
  }
  for (const auto& input : inputs.prompts) {
    if (input.tokens.size() > config.max_model_len) {
      parsed.status = 400;
      parsed.error = fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                 "tokens in the input for embedding generation.",
                                 config.max_model_len, input.tokens.size());
      return parsed;
    }
  }
  parsed.request.inputs = std::move(inputs.prompts);
  return parsed;
}

SimpleResponse handleTokenize(const SimConfig& config, std::string_view body) {
  json doc = parseBody(body);
  std::string model;
  std::string error;
  if (int status = checkModel(config, doc, model, error); status != 0) return errorResponse(status, error);
  PromptResult prompt;
  if (doc.contains("messages")) {
    bool add_generation_prompt = true;
    if (!readBool(doc, "add_generation_prompt", add_generation_prompt, error)) return errorResponse(400, error);
    prompt = chatPrompt(doc, add_generation_prompt);
  } else {
    prompt = completionPrompt(doc);
  }
  if (!prompt.ok()) return errorResponse(400, prompt.error);
  json answer{{"count", prompt.prompt.tokens.size()},
              {"max_model_len", config.max_model_len},
              {"tokens", prompt.prompt.tokens}};
  return SimpleResponse{200, "application/json", answer.dump()};
}

SimpleResponse handleCountTokens(const SimConfig& config, std::string_view body) {
  json doc = parseBody(body);
  std::string model;
  std::string error;
  if (int status = checkModel(config, doc, model, error); status != 0)
    return SimpleResponse{status, "application/json", anthropicErrorJson(status, error).dump()};
  PromptResult prompt = anthropicPrompt(doc);
  if (!prompt.ok()) return SimpleResponse{400, "application/json", anthropicErrorJson(400, prompt.error).dump()};
  return SimpleResponse{200, "application/json", json{{"input_tokens", prompt.prompt.tokens.size()}}.dump()};
}

SimpleResponse handleCacheMatch(std::string_view body,
                                const std::function<CacheMatch(std::span<const uint32_t>)>& lookup,
                                EngineDialect dialect) {
  json doc = parseBody(body);
  if (doc.is_discarded() || !doc.is_object()) return errorResponse(400, "the request body must be a JSON object");
  PromptResult prompt;
  if (auto ids = doc.find("token_ids"); ids != doc.end()) {
    prompt = completionPrompt(json{{"prompt", *ids}});
    if (!prompt.ok()) prompt.error = "'token_ids' must be a non-empty list of token ids";
  } else if (doc.contains("messages")) {
    prompt = chatPrompt(doc, true, dialect);
  } else if (doc.contains("prompt")) {
    prompt = completionPrompt(doc, dialect);
  } else {
    prompt.error = "one of 'messages', 'prompt' or 'token_ids' is required";
  }
  if (!prompt.ok()) return errorResponse(400, prompt.error);
  CacheMatch match = lookup(prompt.prompt.tokens);
  json answer{{"cached_tokens", match.cached_tokens},
              {"prompt_tokens", prompt.prompt.tokens.size()},
              {"num_requests_running", match.num_requests_running},
              {"num_requests_waiting", match.num_requests_waiting},
              {"kv_cache_usage_perc", match.kv_cache_usage}};
  return SimpleResponse{200, "application/json", answer.dump()};
}

SimpleResponse handleSimInfo(const SimConfig& config) {
  json answer{{"name", config.name},
              {"role", config.role},
              {"engine_id", config.engineId()},
              {"engine_dialect", config.engine_dialect},
              {"kv_cache_model", config.kv_cache_model},
              {"block_size", config.block_size},
              {"kv_transfer_ms_per_1k_tokens", config.kv_transfer_ms_per_1k_tokens}};
  return SimpleResponse{200, "application/json", answer.dump()};
}

SimpleResponse handleModels(const SimConfig& config, int64_t created) {
  return SimpleResponse{200, "application/json", modelsList(config.models, created, config.max_model_len).dump()};
}

SimpleResponse faultsResponse(const Faults& faults) {
  json answer{{"health_status", faults.health_status},
              {"error_status", faults.error_status},
              {"stall", faults.stall},
              {"tokenize_status", faults.tokenize_status},
              {"tokenize_delay_ms", faults.tokenize_delay_ms}};
  return SimpleResponse{200, "application/json", answer.dump()};
}

SimpleResponse handleFault(Faults& faults, std::string_view body) {
  json doc = parseBody(body);
  if (doc.is_discarded() || !doc.is_object()) return errorResponse(400, "the fault must be a JSON object");
  Faults next = faults;
  auto readStatus = [&](const char* key, int& value, bool allow_zero) {
    auto it = doc.find(key);
    if (it == doc.end()) return true;
    if (!it->is_number_integer()) return false;
    int64_t status = it->get<int64_t>();
    if (!((allow_zero && status == 0) || (status >= 100 && status <= 599))) return false;
    value = static_cast<int>(status);
    return true;
  };
  if (!readStatus("health_status", next.health_status, false))
    return errorResponse(400, "'health_status' must be an HTTP status (100-599)");
  if (!readStatus("error_status", next.error_status, true))
    return errorResponse(400, "'error_status' must be 0 or an HTTP status (100-599)");
  if (!readStatus("tokenize_status", next.tokenize_status, true))
    return errorResponse(400, "'tokenize_status' must be 0 or an HTTP status (100-599)");
  if (auto it = doc.find("tokenize_delay_ms"); it != doc.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > kMaxTokenizeDelayMs)
      return errorResponse(400, "'tokenize_delay_ms' must be a whole number of milliseconds from 0 to 600000");
    next.tokenize_delay_ms = static_cast<uint32_t>(it->get<int64_t>());
  }
  std::string error;
  if (!readBool(doc, "stall", next.stall, error)) return errorResponse(400, error);
  faults = next;
  return faultsResponse(faults);
}

}  // namespace prefixgate::sim
