#pragma once
// What the request body readers of openai/ share (request.cpp reads every endpoint's body; responses_request.cpp the
// Responses API's `input` items): their error constructors and the raw-JSON views the prompt text keeps. Internal to
// openai/: it exposes simdjson's on-demand types.
#include <simdjson.h>

#include <string>
#include <string_view>

#include "openai/request.h"

namespace prefixgate::openai::body_json {
namespace od = simdjson::ondemand;

inline ParseError bad(std::string message, std::string param = {}) {
  return ParseError{400, std::move(message), std::move(param)};
}

inline ParseError malformed(simdjson::error_code ec) {
  return bad(std::string("request body is not valid JSON: ") + simdjson::error_message(ec));
}

inline std::string_view trimmed(std::string_view raw) {
  while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
    raw.remove_suffix(1);
  return raw;
}

// The JSON text of any value as sent (arrays and objects whole; scalars as their token).
simdjson::error_code rawJson(od::value value, std::string_view& out);

// The body's text from `start` to where the document's iterator stands now (the next token), less trailing
// whitespace: the raw JSON of the value read since `start`. "" when the iterator cannot say.
std::string_view rawSince(const char* start, od::document& doc);

// Appends one unit of prompt text, after one space unless it is the first.
inline void appendUnit(std::string& text, bool& first, std::string_view unit) {
  if (!first) text.push_back(' ');
  first = false;
  text.append(unit);
}

// The Responses API's `input` (a string, or items) as prompt text (see parseRequest's Endpoint::kResponses rule in
// openai/responses_request.h). Defined in responses_request.cpp.
ParseError readResponsesInput(od::value input, od::document& doc, std::string& text);

}  // namespace prefixgate::openai::body_json
