#include "openai/responses_request.h"

#include <algorithm>

#include "openai/body_json.h"

namespace prefixgate::openai {
namespace od = simdjson::ondemand;

namespace {

using namespace body_json;  // the readers' shared helpers (openai/body_json.h)

// A string as its text; anything else as its raw JSON (a function_call_output's output given as parts).
ParseError appendStringOrRaw(od::value value, std::string& text, bool& first) {
  std::string_view s;
  if (value.get_string().get(s) == simdjson::SUCCESS) {
    appendUnit(text, first, s);
    return {};
  }
  if (auto ec = rawJson(value, s)) return malformed(ec);
  appendUnit(text, first, s);
  return {};
}

// A message's content: a string, or parts (input_text / output_text / text: their text; any other: raw JSON).
ParseError appendContent(od::value content, od::document& doc, std::string& text, bool& first) {
  od::json_type type;
  if (auto ec = content.type().get(type)) return malformed(ec);
  if (type == od::json_type::null) return {};
  if (type == od::json_type::string) return appendStringOrRaw(content, text, first);
  if (type != od::json_type::array)
    return bad("'input[].content' must be a string or an array of content parts", "input");
  od::array parts;
  if (auto ec = content.get_array().get(parts)) return malformed(ec);
  for (auto item : parts) {
    od::value part;
    if (auto ec = item.get(part)) return malformed(ec);
    const char* start = part.raw_json_token().data();
    od::object obj;
    if (part.get_object().get(obj)) return bad("each content part of 'input' must be an object", "input");
    std::string_view type_name, part_text;
    bool has_text = false;
    for (auto f : obj) {
      std::string_view key;
      if (auto ec = f.unescaped_key().get(key)) return malformed(ec);
      if (key == "type") {
        if (f.value().get_string().get(type_name)) return bad("a content part's 'type' must be a string", "input");
      } else if (key == "text") {
        has_text = f.value().get_string().get(part_text) == simdjson::SUCCESS;
      }
    }
    const bool textual = type_name == "input_text" || type_name == "output_text" || type_name == "text";
    appendUnit(text, first, textual && has_text ? part_text : rawSince(start, doc));
  }
  return {};
}

// One item of `input` as its unit(s) of the prompt text (see parseResponsesRequest).
ParseError appendItem(od::value item, od::document& doc, std::string& text, bool& first) {
  od::json_type type;
  if (auto ec = item.type().get(type)) return malformed(ec);
  if (type == od::json_type::string) return appendStringOrRaw(item, text, first);
  if (type != od::json_type::object) return bad("each item of 'input' must be an object", "input");
  const char* start = item.raw_json_token().data();
  od::object obj;
  if (auto ec = item.get_object().get(obj)) return malformed(ec);
  std::string_view type_name, name, arguments;
  std::string own;  // a message's content, or a function_call_output's output
  bool own_first = true, has_content = false;
  for (auto f : obj) {
    std::string_view key;
    if (auto ec = f.unescaped_key().get(key)) return malformed(ec);
    od::value v = f.value();
    if (key == "type") {
      if (v.get_string().get(type_name)) return bad("an input item's 'type' must be a string", "input");
    } else if (key == "content") {
      own.clear();
      own_first = true;
      has_content = true;
      if (auto err = appendContent(v, doc, own, own_first)) return err;
    } else if (key == "output") {
      own.clear();
      own_first = true;
      if (auto err = appendStringOrRaw(v, own, own_first)) return err;
    } else if (key == "name") {
      if (v.get_string().get(name) != simdjson::SUCCESS) name = {};
    } else if (key == "arguments") {
      if (v.get_string().get(arguments) != simdjson::SUCCESS) arguments = {};
    }
  }
  if (type_name == "function_call") {
    if (!first) text.push_back(' ');
    first = false;
    text.append(name).append(" ").append(arguments);
  } else if (type_name == "function_call_output" || type_name == "message" || (type_name.empty() && has_content)) {
    appendUnit(text, first, own);
  } else {
    appendUnit(text, first, rawSince(start, doc));
  }
  return {};
}

}  // namespace

bool validResponseId(std::string_view id) {
  if (id.empty() || id.size() > kMaxResponseIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

ParseError body_json::readResponsesInput(od::value input, od::document& doc, std::string& text) {
  od::json_type type;
  if (auto ec = input.type().get(type)) return malformed(ec);
  bool first = true;
  if (type == od::json_type::null) return {};
  if (type == od::json_type::string) return appendStringOrRaw(input, text, first);
  if (type != od::json_type::array) return bad("'input' must be a string or an array of input items", "input");
  od::array items;
  if (auto ec = input.get_array().get(items)) return malformed(ec);
  for (auto entry : items) {
    od::value item;
    if (auto ec = entry.get(item)) return malformed(ec);
    if (auto err = appendItem(item, doc, text, first)) return err;
  }
  return {};
}

}  // namespace prefixgate::openai
