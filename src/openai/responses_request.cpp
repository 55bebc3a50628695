#include "openai/responses_request.h"

#include <simdjson.h>

#include <algorithm>

namespace prefixgate::openai {
namespace od = simdjson::ondemand;

namespace {

ParseError bad(std::string message, std::string param = {}) {
  return ParseError{400, std::move(message), std::move(param)};
}

ParseError malformed(simdjson::error_code ec) {
  return bad(std::string("request body is not valid JSON: ") + simdjson::error_message(ec));
}

std::string_view trimmed(std::string_view raw) {
  while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
    raw.remove_suffix(1);
  return raw;
}

// The body's text from `start` to where the document's iterator stands now: the raw JSON of the value read since.
std::string_view rawSince(const char* start, od::document& doc) {
  const char* end = nullptr;
  if (doc.current_location().get(end) != simdjson::SUCCESS || end < start) return {};
  return trimmed(std::string_view(start, static_cast<size_t>(end - start)));
}

// The JSON text of any value as sent (arrays and objects whole; scalars as their token).
simdjson::error_code rawJson(od::value value, std::string_view& out) {
  od::json_type type;
  if (auto ec = value.type().get(type)) return ec;
  if (type == od::json_type::array) {
    od::array arr;
    if (auto ec = value.get_array().get(arr)) return ec;
    return arr.raw_json().get(out);
  }
  if (type == od::json_type::object) {
    od::object obj;
    if (auto ec = value.get_object().get(obj)) return ec;
    return obj.raw_json().get(out);
  }
  out = trimmed(value.raw_json_token());
  return simdjson::SUCCESS;
}

void appendUnit(std::string& text, bool& first, std::string_view unit) {
  if (!first) text.push_back(' ');
  first = false;
  text.append(unit);
}

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

ParseError readInput(od::value input, od::document& doc, std::string& text) {
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

}  // namespace

bool validResponseId(std::string_view id) {
  if (id.empty() || id.size() > kMaxResponseIdBytes) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
  });
}

ParseError parseResponsesRequest(std::string& body, bool include_tools, uint32_t max_json_depth, RequestView& out) {
  out = RequestView{};
  out.endpoint = Endpoint::kResponses;
  if (nestedDeeperThan(body, max_json_depth))
    return bad("request body nests arrays and objects deeper than limits.max_json_depth (" +
               std::to_string(max_json_depth) + ")");
  if (body.capacity() < body.size() + simdjson::SIMDJSON_PADDING) body.reserve(body.size() + simdjson::SIMDJSON_PADDING);
  thread_local od::parser parser;
  od::document doc;
  if (auto ec = parser.iterate(simdjson::padded_string_view(body.data(), body.size(), body.capacity())).get(doc))
    return malformed(ec);
  od::object root;
  if (auto ec = doc.get_object().get(root))
    return ec == simdjson::INCORRECT_TYPE ? bad("request body must be a JSON object") : malformed(ec);
  std::string tools, instructions, input_text;
  bool has_model = false;
  // A key given twice counts as its last occurrence, as the engine reads it.
  for (auto field : root) {
    std::string_view key;
    if (auto ec = field.unescaped_key().get(key)) return malformed(ec);
    od::value value = field.value();
    if (key == "model") {
      std::string_view model;
      if (value.get_string().get(model)) return bad("'model' must be a string", "model");
      out.model.assign(model);
      has_model = true;
    } else if (key == "stream") {
      od::json_type t;
      if (auto ec = value.type().get(t)) return malformed(ec);
      if (t == od::json_type::null) continue;
      if (value.get_bool().get(out.stream)) return bad("'stream' must be a boolean", "stream");
    } else if (key == "max_output_tokens") {
      uint64_t n = 0;  // another type or range: the engine validates it
      if (!value.get_uint64().get(n)) out.max_tokens = static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
    } else if (key == "instructions") {
      std::string_view s;
      instructions.clear();
      if (value.get_string().get(s) == simdjson::SUCCESS) instructions.assign(s);  // null: none
    } else if (key == "input") {
      input_text.clear();
      input_text.reserve(body.size());
      const char* start = value.raw_json_token().data();
      if (auto err = readInput(value, doc, input_text)) return err;
      out.raw_messages = rawSince(start, doc);
    } else if (key == "tools") {
      std::string_view raw;
      if (auto ec = rawJson(value, raw)) return malformed(ec);
      tools.clear();
      if (include_tools && raw != "null") tools.assign(raw);
      out.raw_tools = raw == "null" ? std::string_view() : raw;
    } else if (key == "kv_transfer_params") {
      out.has_kv_transfer_params = true;
    } else if (key == "cache_salt") {
      std::string_view salt;
      if (value.get_string().get(salt) == simdjson::SUCCESS) out.cache_salt.assign(salt);
    } else if (key == "user") {
      std::string_view user;
      if (value.get_string().get(user) == simdjson::SUCCESS) out.user.assign(user);
    }
  }
  const char* trailing = nullptr;
  if (doc.current_location().get(trailing) == simdjson::SUCCESS)
    return bad("request body has trailing content after the JSON object");
  if (!has_model) return bad("'model' is required", "model");
  if (out.model.empty()) return bad("'model' must not be empty", "model");
  // As chat: tools first, then the instructions (a system message), then the input items.
  std::string& text = out.prompt_text;
  text.reserve(tools.size() + instructions.size() + input_text.size() + 2);
  bool first = true;
  if (!tools.empty()) appendUnit(text, first, tools);
  if (!instructions.empty()) appendUnit(text, first, instructions);
  if (!input_text.empty()) appendUnit(text, first, input_text);
  return {};
}

std::optional<std::string> previousResponseId(const std::string& body) {
  if (body.capacity() < body.size() + simdjson::SIMDJSON_PADDING) return std::nullopt;
  thread_local od::parser parser;
  od::document doc;
  if (parser.iterate(simdjson::padded_string_view(body.data(), body.size(), body.capacity())).get(doc))
    return std::nullopt;
  od::object root;
  if (doc.get_object().get(root)) return std::nullopt;
  std::optional<std::string> id;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return std::nullopt;
    if (key != "previous_response_id") continue;
    std::string_view value;
    if (field.value().get_string().get(value) == simdjson::SUCCESS && validResponseId(value))
      id.emplace(value);
    else
      id.reset();
  }
  return id;
}

}  // namespace prefixgate::openai
