#pragma once
// Which inference engine a pod runs: the dialect the gateway speaks to it (the names of its /metrics series, its
// tokenize protocol, where it reports its cache size). Header-only and dependency-free, so every layer (the pure
// tokenize protocol included) can name a dialect.
#include <cstdint>
#include <optional>
#include <string_view>

namespace prefixgate::engine {

enum class EngineKind : uint8_t {
  kAuto,      // not known yet: recognised from the pod's first /metrics page (the pods file's `engine: auto`)
  kVllm,      // vLLM: vllm:* series, POST /tokenize with prompt or messages
  kSglang,    // SGLang: sglang:* series, POST /tokenize with prompt (no chat form)
  kLlamaCpp,  // llama.cpp's llama-server: llamacpp:* series, /apply-template then /tokenize with content, /props
};

// The name used in the pods file, the Kubernetes label, /debug/pods and metric labels.
constexpr std::string_view engineKindName(EngineKind kind) {
  switch (kind) {
    case EngineKind::kVllm: return "vllm";
    case EngineKind::kSglang: return "sglang";
    case EngineKind::kLlamaCpp: return "llamacpp";
    case EngineKind::kAuto: break;
  }
  return "auto";
}

// What a configuration may say, for error messages.
inline constexpr std::string_view kEngineKindChoices = "vllm, sglang, llamacpp or auto";

// The kind named `name` (exactly as engineKindName writes it; "llama.cpp" and "llama-cpp" are accepted too, as
// users write it); nullopt for anything else.
constexpr std::optional<EngineKind> parseEngineKind(std::string_view name) {
  for (EngineKind kind : {EngineKind::kAuto, EngineKind::kVllm, EngineKind::kSglang, EngineKind::kLlamaCpp})
    if (name == engineKindName(kind)) return kind;
  if (name == "llama.cpp" || name == "llama-cpp") return EngineKind::kLlamaCpp;
  return std::nullopt;
}

}  // namespace prefixgate::engine
