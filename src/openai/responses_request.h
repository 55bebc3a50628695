#pragma once
// The OpenAI Responses API (POST /v1/responses): the ids that name a stored response (previous_response_id,
// /v1/responses/{id}). Its body is read by parseRequest (Endpoint::kResponses; the prompt-text rule is
// RequestView::prompt_text's).
#include <cstdint>
#include <string>
#include <string_view>

#include "openai/request.h"

namespace prefixgate::openai {

// The longest response id the gateway remembers or routes by: longer ids are refused (400), never stored.
inline constexpr size_t kMaxResponseIdBytes = 256;
// Whether `id` can name a response: 1 to kMaxResponseIdBytes bytes of [A-Za-z0-9_.-] (OpenAI's and vLLM's ids are
// "resp_" and hex).
bool validResponseId(std::string_view id);

}  // namespace prefixgate::openai
