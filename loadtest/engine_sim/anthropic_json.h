#pragma once
// vLLM's Anthropic Messages API (/v1/messages, /v1/messages/count_tokens) in the simulator, as pure functions: the
// prompt of a Messages body (through the same stand-in chat template as chat: `system` becomes a system message,
// content blocks their text), and the answers: a whole message, the named SSE events of a stream, errors.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine_sim/openai_json.h"
#include "engine_sim/prompt.h"

namespace prefixgate::sim {

// The prompt of a Messages body: `system` (a string or text blocks, their texts run together) as a system message,
// then `messages` whose content is a string or blocks (text: its text; tool_use: its name and input JSON;
// tool_result: its content the same way; others: their JSON), and `tools` first, all through chatTemplate.
PromptResult anthropicPrompt(const nlohmann::json& body);

// Anthropic's stop_reason for a finish reason: "length" -> "max_tokens", else "end_turn".
std::string_view stopReason(std::string_view finish_reason);

// {"id", "type": "message", "role": "assistant", "model", "content": [{"type": "text", "text"}], "stop_reason",
// "stop_sequence": null, "usage": {"input_tokens", "output_tokens"}}.
nlohmann::json messageResponse(const CompletionMeta& meta, const std::string& text, std::string_view finish_reason,
                               const Usage& usage);

// "event: <type>\ndata: <json>\n\n".
std::string namedEvent(const nlohmann::json& event);
// The stream's opening events, sent with its first token: message_start (usage: input tokens, 1 output token) and
// content_block_start (an empty text block at index 0).
std::string messageStartEvents(const CompletionMeta& meta, const Usage& usage);
// One token: content_block_delta with a text_delta.
std::string textDeltaEvent(const std::string& text);
// The closing events: content_block_stop, message_delta (stop_reason, usage.output_tokens), message_stop.
std::string messageEndEvents(std::string_view finish_reason, const Usage& usage);

// {"type": "error", "error": {"type", "message"}} with Anthropic's type for the status.
nlohmann::json anthropicErrorJson(int status, std::string_view message);

}  // namespace prefixgate::sim
