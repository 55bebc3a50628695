#include "engine_sim/engine_dialect.h"

namespace prefixgate::sim {

std::optional<EngineDialect> parseEngineDialect(std::string_view name) {
  if (name == "vllm") return EngineDialect::kVllm;
  if (name == "sglang") return EngineDialect::kSglang;
  if (name == "llamacpp") return EngineDialect::kLlamacpp;
  return std::nullopt;
}

std::string_view engineDialectName(EngineDialect dialect) {
  switch (dialect) {
    case EngineDialect::kSglang: return "sglang";
    case EngineDialect::kLlamacpp: return "llamacpp";
    case EngineDialect::kVllm: break;
  }
  return "vllm";
}

}  // namespace prefixgate::sim
