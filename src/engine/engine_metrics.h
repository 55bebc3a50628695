#pragma once
// Each engine dialect's /metrics page mapped onto the load signals the gateway routes on (running and waiting
// requests, KV cache usage and size, prefix-cache counters), from the engines' own sources:
//   vLLM       vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc
//              (vllm:gpu_cache_usage_perc before), vllm:prefix_cache_{hits,queries}_total,
//              vllm:cache_config_info{block_size,num_gpu_blocks}
//   SGLang     sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage, sglang:max_total_num_tokens,
//              sglang:cached_tokens_total and sglang:prompt_tokens_total (python/sglang/srt/metrics/collector.py)
//   llama.cpp  llamacpp:requests_processing, llamacpp:requests_deferred, llamacpp:prompt_tokens_cached_total and
//              llamacpp:prompt_tokens_total (uncached tokens) (tools/server/server-task.cpp, to_metrics); no KV
//              usage; its capacity comes from GET /props (total_slots x default_generation_settings.n_ctx)
// Pure: no I/O, no clock.
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/engine_kind.h"
#include "engine/engine_load.h"

namespace prefixgate::engine {

// The page read as `kind`'s dialect; kAuto recognises the dialect from the first series of a known engine on
// the page (snapshot.engine says which; it stays kAuto when the page names none). Several series of one metric
// (data-parallel engines, ranks) are summed, except usage fractions, which are their mean (each engine has its
// own cache). NaN and infinite samples are ignored. snapshot.known_series counts the dialect's samples: 0 means
// the page said nothing the gateway can use, which the scraper counts as a failed scrape. Sets valid; the caller
// sets scraped_at_ms.
EngineSnapshot parseEngineMetrics(EngineKind kind, std::string_view text);

// The vLLM reading (parseEngineMetrics(kVllm, text)), kept for its tests and the fuzz target.
inline EngineSnapshot parseVllmMetrics(std::string_view text) { return parseEngineMetrics(EngineKind::kVllm, text); }

// Which known engine's series the page holds, for an error message ("the page has llamacpp: series"); kAuto when
// none.
EngineKind recogniseEngine(std::string_view text);

// What the signals `kind` cannot report at all, for /debug/pods (e.g. llama.cpp has no KV usage series): a
// comma-separated list of snapshot field names, "" when none.
std::string_view unreportedSignals(EngineKind kind);

// llama.cpp's GET /props: `total_slots` and `default_generation_settings.n_ctx` (each slot's context). Strict:
// both must be whole numbers from 1 to 2^31 (the page is the engine's, as hostile as a client's); false with
// `error` set otherwise.
struct SlotCapacity {
  uint32_t slots = 0;
  uint32_t slot_context_tokens = 0;
};
bool parseLlamaCppProps(std::string_view body, SlotCapacity& out, std::string& error);

}  // namespace prefixgate::engine
