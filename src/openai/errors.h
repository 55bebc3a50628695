#pragma once
// OpenAI-shaped error bodies: {"error": {"message", "type", "param", "code"}}.
#include <string>
#include <string_view>

namespace prefixgate::openai {

// The OpenAI error `type` for an HTTP status (400 invalid_request_error, 404 not_found_error, ...).
std::string_view errorType(int status);
// The JSON body; `param` empty is written as null.
std::string errorBody(int status, std::string_view message, std::string_view param = {});

}  // namespace prefixgate::openai
