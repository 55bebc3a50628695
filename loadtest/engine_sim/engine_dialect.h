#pragma once
// Which engine's HTTP surface the simulator speaks (--engine-dialect). The engine model (scheduler, KV cache,
// timing) is the same for all; the dialect decides the wire formats: /metrics, the tokenizer endpoints, the
// response bodies, the error shape, and how prompts are tokenized. docs/simulator.md, "Engine dialects".
#include <optional>
#include <string_view>

namespace prefixgate::sim {

enum class EngineDialect {
  kVllm,      // vLLM's OpenAI server (the default)
  kSglang,    // SGLang's server (python/sglang/srt/entrypoints)
  kLlamacpp,  // llama.cpp's llama-server (tools/server)
};

// "vllm", "sglang" or "llamacpp"; nullopt for anything else.
std::optional<EngineDialect> parseEngineDialect(std::string_view name);
std::string_view engineDialectName(EngineDialect dialect);

}  // namespace prefixgate::sim
