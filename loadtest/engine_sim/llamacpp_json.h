#pragma once
// The bodies llama.cpp's llama-server sends (tools/server), built with nlohmann::ordered_json as it builds them,
// so fields come in its order (pure). Sources: server-task.cpp (to_json_oaicompat*, usage_json_oaicompat,
// to_metrics), server-common.cpp (server_slot_stats::to_json, format_error_response), server-context.cpp
// (post_tokenize, get_props, get_slots).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_sim/metrics_text.h"
#include "engine_sim/openai_json.h"
#include "engine_sim/tokenizer.h"

namespace prefixgate::sim::llamacpp {

using OrderedJson = nlohmann::ordered_json;

// What llama_build_info() says in /props and system_fingerprint.
inline constexpr std::string_view kBuildInfo = "sim";

// format_error_response's type for a status ("invalid_request_error", "not_found_error", "server_error", ...).
std::string errorType(int status);
// {"error": {"code", "message", "type"}}.
OrderedJson errorJson(int status, std::string_view message);

// server_slot_stats::to_json: cache_n, prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second, predicted_n,
// predicted_ms, predicted_per_token_ms, predicted_per_second (a request's first output token is free: the rates
// count predicted_n - 1 decode steps).
OrderedJson timingsJson(const Timings& timings);
// usage_json_oaicompat: completion_tokens, prompt_tokens, total_tokens, prompt_tokens_details.cached_tokens.
OrderedJson usageJson(const Usage& usage);

// One streamed token: for chat, the first token is preceded by the {"role": "assistant", "content": null} chunk.
std::vector<OrderedJson> tokenChunks(const CompletionMeta& meta, const std::string& text, bool first);
// The final result of a stream: chat, the finish chunk and (include_usage) the usage chunk, the last of them
// with timings; completion, one chunk with finish_reason, usage and timings (to_json_oaicompat has usage always).
std::vector<OrderedJson> finalChunks(const CompletionMeta& meta, std::string_view finish_reason, bool include_usage,
                                     const Usage& usage, const Timings& timings);
// A whole chat.completion or text_completion, with usage and timings.
OrderedJson completionBody(const CompletionMeta& meta, const std::string& text, std::string_view finish_reason,
                           const Usage& usage, const Timings& timings);
// "data: <json>\n\n" per chunk (format_oai_sse).
std::string sseEvents(const std::vector<OrderedJson>& chunks);

// POST /tokenize's tokens: ids, or with_pieces {"id", "piece"} objects (a piece that is not valid UTF-8 as its
// byte values).
OrderedJson tokensJson(const std::vector<TokenPiece>& pieces, bool with_pieces);

// The /metrics page (to_metrics): "# HELP llamacpp:<name> ...", "# TYPE ...", "llamacpp:<name> <value>", counters
// then gauges, values as a C++ stream prints a double; no labels.
std::string metricsText(const MetricsSnapshot& snapshot);

}  // namespace prefixgate::sim::llamacpp
