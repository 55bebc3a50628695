#pragma once
// The OpenAI Responses API (POST /v1/responses): its body read into a RequestView like chat's, and the ids that
// name a stored response (previous_response_id, /v1/responses/{id}).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "openai/request.h"

namespace prefixgate::openai {

// Parses a Responses body (called by parseRequest for Endpoint::kResponses). The prompt text follows chat's rule, so one
// conversation hashes the same way turn after turn: tools JSON (when include_tools), then `instructions` (as a
// system message would be), then each item of `input` (a string is one item), joined by one space: a message's
// content (a string, or its parts: an input_text/output_text part's text, any other part its raw JSON, joined by
// one space), a function_call's name and arguments, a function_call_output's output, any other item its raw JSON.
// `model` is required; `input` may be absent (a request continuing a stored response with nothing new).
ParseError parseResponsesRequest(std::string& body, bool include_tools, uint32_t max_json_depth, RequestView& out);

// The body's top-level `previous_response_id` when it is a valid response id (validResponseId); empty when absent,
// null or invalid (the engine answers an invalid one). `body` must be padded (parseRequest has done so).
std::optional<std::string> previousResponseId(const std::string& body);

// The longest response id the gateway remembers or routes by: longer ids are refused (400), never stored.
inline constexpr size_t kMaxResponseIdBytes = 256;
// Whether `id` can name a response: 1 to kMaxResponseIdBytes bytes of [A-Za-z0-9_.-] (OpenAI's and vLLM's ids are
// "resp_" and hex).
bool validResponseId(std::string_view id);

}  // namespace prefixgate::openai
