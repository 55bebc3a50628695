#pragma once
// How the simulated engine keeps its KV cache (--kv-cache-model), and so what a request finds cached:
//   paged  vLLM v1's paged blocks with prefix caching shared by all sequences, LRU eviction (scheduler.h)
//   slots  llama.cpp's llama-server: one slot per parallel sequence holding the tokens of the last request it
//          served, and an optional host prompt cache (slot_scheduler.h)
// makeStepScheduler (engine.cpp) builds the one named.
#include <optional>
#include <string_view>

namespace prefixgate::sim {

enum class KvCacheModel {
  kPaged,  // the default
  kSlots,
};

// "paged" or "slots"; nullopt for anything else.
std::optional<KvCacheModel> parseKvCacheModel(std::string_view name);
std::string_view kvCacheModelName(KvCacheModel model);

}  // namespace prefixgate::sim
