#include "engine_sim/dialect.h"

namespace prefixgate::sim {

SimpleResponse Dialect::health(int status) const { return SimpleResponse{status, "text/plain", ""}; }

std::optional<SimpleResponse> Dialect::info(std::string_view, const EngineView&) const { return std::nullopt; }

SimpleResponse Dialect::models(int64_t created) const { return handleModels(config_, created); }

std::string Dialect::tokenEvents(const CompletionMeta& meta, const std::string& text, bool first) const {
  return sseEvent(tokenChunk(meta, text, first));
}

std::string Dialect::streamEnd(const CompletionMeta& meta, std::string_view finish_reason, bool include_usage,
                               const Outcome& outcome) const {
  std::string tail = sseEvent(finishChunk(meta, finish_reason));
  if (include_usage) tail += sseEvent(usageChunk(meta, outcome.usage));
  tail += kSseDone;
  return tail;
}

std::string Dialect::completionBody(const CompletionMeta& meta, const std::string& text,
                                    std::string_view finish_reason, const Outcome& outcome) const {
  nlohmann::json body = completionResponse(meta, text, finish_reason, outcome.usage);
  if (outcome.kv_transfer_params) body["kv_transfer_params"] = *outcome.kv_transfer_params;
  return body.dump();
}

std::unique_ptr<Dialect> makeDialect(const SimConfig& config) {
  switch (config.dialect()) {
    case EngineDialect::kSglang: return makeSglangDialect(config);
    case EngineDialect::kLlamacpp: return makeLlamacppDialect(config);
    case EngineDialect::kVllm: break;
  }
  return makeVllmDialect(config);
}

}  // namespace prefixgate::sim
