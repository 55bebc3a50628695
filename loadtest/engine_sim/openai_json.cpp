#include "engine_sim/openai_json.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

const char* objectName(Endpoint endpoint, bool chunk) {
  if (endpoint == Endpoint::kCompletion) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json envelope(const CompletionMeta& meta, bool chunk) {
  return json{{"id", meta.id},
              {"object", objectName(meta.endpoint, chunk)},
              {"created", meta.created},
              {"model", meta.model}};
}

json finishReasonJson(std::string_view finish_reason) {
  return finish_reason.empty() ? json(nullptr) : json(std::string(finish_reason));
}

}  // namespace

std::string errorType(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 404: return "NotFoundError";
    case 405: return "MethodNotAllowedError";
    case 413: return "RequestEntityTooLargeError";
    case 429: return "RateLimitError";
    case 500: return "InternalServerError";
    case 503: return "ServiceUnavailableError";
    default: return status >= 500 ? "InternalServerError" : "BadRequestError";
  }
}

json errorJson(int status, std::string_view message) {
  return json{{"error",
               {{"message", std::string(message)}, {"type", errorType(status)}, {"param", nullptr}, {"code", status}}}};
}

json usageJson(const Usage& usage) {
  return json{{"prompt_tokens", usage.prompt_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

json completionResponse(const CompletionMeta& meta, const std::string& text, std::string_view finish_reason,
                        const Usage& usage) {
  json body = envelope(meta, false);
  json choice{{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finishReasonJson(finish_reason)},
              {"stop_reason", nullptr}};
  if (meta.endpoint == Endpoint::kChat) {
    choice["message"] = json{{"role", "assistant"}, {"content", text}, {"tool_calls", json::array()}};
  } else {
    choice["text"] = text;
    choice["prompt_logprobs"] = nullptr;
  }
  body["choices"] = json::array({std::move(choice)});
  body["usage"] = usageJson(usage);
  return body;
}

json tokenChunk(const CompletionMeta& meta, const std::string& text, bool first) {
  json chunk = envelope(meta, true);
  json choice{{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (meta.endpoint == Endpoint::kChat) {
    json delta{{"content", text}};
    if (first) delta["role"] = "assistant";
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
    choice["stop_reason"] = nullptr;
  }
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json finishChunk(const CompletionMeta& meta, std::string_view finish_reason) {
  json chunk = envelope(meta, true);
  json choice{{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finishReasonJson(finish_reason)}};
  if (meta.endpoint == Endpoint::kChat) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
    choice["stop_reason"] = nullptr;
  }
  chunk["choices"] = json::array({std::move(choice)});
  return chunk;
}

json usageChunk(const CompletionMeta& meta, const Usage& usage) {
  json chunk = envelope(meta, true);
  chunk["choices"] = json::array();
  chunk["usage"] = usageJson(usage);
  return chunk;
}

std::string sseEvent(const json& chunk) { return "data: " + chunk.dump() + "\n\n"; }

json modelsList(const std::vector<std::string>& models, int64_t created, uint32_t max_model_len) {
  json data = json::array();
  for (const auto& model : models) {
    data.push_back(json{{"id", model},
                        {"object", "model"},
                        {"created", created},
                        {"owned_by", "vllm"},
                        {"root", model},
                        {"parent", nullptr},
                        {"max_model_len", max_model_len},
                        {"permission", json::array()}});
  }
  return json{{"object", "list"}, {"data", std::move(data)}};
}

json embeddingsResponse(const std::string& model, const std::vector<std::vector<float>>& embeddings,
                        uint64_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < embeddings.size(); ++i)
    data.push_back(json{{"object", "embedding"}, {"index", i}, {"embedding", embeddings[i]}});
  return json{{"object", "list"},
              {"data", std::move(data)},
              {"model", model},
              {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}};
}

}  // namespace prefixgate::sim
