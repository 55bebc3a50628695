#include "openai/request.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "openai/body_json.h"
#include "openai/responses_request.h"
#include "util/thread_spares.h"

namespace prefixgate::openai {
namespace od = simdjson::ondemand;

// The two raw-JSON readers of openai/body_json.h, compiled once.
simdjson::error_code body_json::rawJson(od::value value, std::string_view& out) {
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

std::string_view body_json::rawSince(const char* start, od::document& doc) {
  const char* end = nullptr;
  if (doc.current_location().get(end) != simdjson::SUCCESS || end < start) return {};
  return trimmed(std::string_view(start, static_cast<size_t>(end - start)));
}

namespace {

using namespace body_json;  // the readers' shared helpers (openai/body_json.h)

// A message's content: a string is used unescaped; an array of parts (multimodal) as its raw JSON text.
ParseError appendContent(od::value content, std::string& text, bool& first) {
  od::json_type type;
  if (auto ec = content.type().get(type)) return malformed(ec);
  auto sep = [&] {
    if (!first) text.push_back(' ');
    first = false;
  };
  if (type == od::json_type::string) {
    std::string_view s;
    if (auto ec = content.get_string().get(s)) return malformed(ec);
    sep();
    text.append(s);
  } else if (type == od::json_type::array) {
    std::string_view raw;
    if (auto ec = rawJson(content, raw)) return malformed(ec);
    sep();
    text.append(raw);
  } else if (type != od::json_type::null) {
    return bad("'messages[].content' must be a string, an array of content parts or null", "messages");
  }
  return {};
}

// A non-empty array of message objects, each one's `content` given to `append` (chat's and Anthropic's rules).
template <typename AppendContent>
ParseError readMessagesWith(od::value messages, AppendContent&& append) {
  od::array arr;
  if (messages.get_array().get(arr)) return bad("'messages' must be an array of message objects", "messages");
  size_t count = 0;
  for (auto item : arr) {
    od::object msg;
    if (item.get_object().get(msg)) return bad("each entry of 'messages' must be an object", "messages");
    for (auto field : msg) {
      std::string_view key;
      if (auto ec = field.unescaped_key().get(key)) return malformed(ec);
      if (key != "content") continue;
      if (auto err = append(field.value())) return err;
    }
    ++count;
  }
  if (count == 0) return bad("'messages' must not be empty", "messages");
  return {};
}

ParseError readMessages(od::value messages, std::string& text, bool& first) {
  return readMessagesWith(messages, [&](od::value content) { return appendContent(content, text, first); });
}

// Anthropic content: a string is one unit; an array's blocks are one unit each (see RequestView::prompt_text).
// `doc` is the document being read (a block's raw JSON is the text its fields spanned).
ParseError appendAnthropicContent(od::value content, od::document& doc, std::string& text, bool& first,
                                  const char* field);

// One content block (an object) as its unit of the prompt text.
ParseError appendAnthropicBlock(od::value item, od::document& doc, std::string& text, bool& first, const char* field) {
  const char* start = item.raw_json_token().data();
  od::object block;
  if (item.get_object().get(block)) return bad(std::string("each block of '") + field + "' must be an object", field);
  std::string_view type, name, input;
  std::string own;  // the block's text: text, thinking, or a tool_result's content
  bool own_first = true;
  for (auto f : block) {
    std::string_view key;
    if (auto ec = f.unescaped_key().get(key)) return malformed(ec);
    od::value v = f.value();
    if (key == "type") {
      if (v.get_string().get(type)) return bad(std::string("a block's 'type' in '") + field + "' must be a string", field);
    } else if (key == "text" || key == "thinking") {
      std::string_view t;
      if (v.get_string().get(t) == simdjson::SUCCESS) own.assign(t);  // another type: the engine refuses it
    } else if (key == "content") {
      own.clear();
      own_first = true;
      if (auto err = appendAnthropicContent(v, doc, own, own_first, field)) return err;
    } else if (key == "name") {
      if (v.get_string().get(name) != simdjson::SUCCESS) name = {};
    } else if (key == "input") {
      if (auto ec = rawJson(v, input)) return malformed(ec);
    }
  }
  if (!first) text.push_back(' ');
  first = false;
  if (type == "text" || type == "thinking" || type == "tool_result") {
    text.append(own);
  } else if (type == "tool_use") {
    text.append(name).append(" ").append(input);
  } else {
    text.append(rawSince(start, doc));
  }
  return {};
}

ParseError appendAnthropicContent(od::value content, od::document& doc, std::string& text, bool& first,
                                  const char* field) {
  od::json_type type;
  if (auto ec = content.type().get(type)) return malformed(ec);
  if (type == od::json_type::string) {
    std::string_view s;
    if (auto ec = content.get_string().get(s)) return malformed(ec);
    if (!first) text.push_back(' ');
    first = false;
    text.append(s);
    return {};
  }
  if (type != od::json_type::array)
    return bad(std::string("'") + field + "' content must be a string or an array of content blocks", field);
  od::array blocks;
  if (auto ec = content.get_array().get(blocks)) return malformed(ec);
  for (auto item : blocks) {
    od::value block;
    if (auto ec = item.get(block)) return malformed(ec);
    if (auto err = appendAnthropicBlock(block, doc, text, first, field)) return err;
  }
  return {};
}

// Anthropic's `messages`: a non-empty array of {role, content}.
ParseError readAnthropicMessages(od::value messages, od::document& doc, std::string& text, bool& first) {
  return readMessagesWith(messages, [&](od::value content) {
    return appendAnthropicContent(content, doc, text, first, "messages");
  });
}

// Anthropic's `system`: a string, or text blocks whose texts run together (as the engine joins them), so a system
// prompt sent either way is the same text.
ParseError readAnthropicSystem(od::value system, od::document& doc, std::string& text) {
  text.clear();
  od::json_type type;
  if (auto ec = system.type().get(type)) return malformed(ec);
  if (type == od::json_type::null) return {};
  if (type == od::json_type::string) {
    std::string_view s;
    if (auto ec = system.get_string().get(s)) return malformed(ec);
    text.assign(s);
    return {};
  }
  if (type != od::json_type::array) return bad("'system' must be a string or an array of text blocks", "system");
  od::array blocks;
  if (auto ec = system.get_array().get(blocks)) return malformed(ec);
  for (auto item : blocks) {
    od::value block;
    if (auto ec = item.get(block)) return malformed(ec);
    bool first = true;  // no separator: the blocks' texts run together
    if (auto err = appendAnthropicBlock(block, doc, text, first, "system")) return err;
  }
  return {};
}

// prompt: a string, a list of strings (joined by one space) or a list of token ids.
ParseError readPrompt(od::value prompt, RequestView& out) {
  out.prompt_text.clear();
  out.prompt_token_ids.clear();
  out.has_token_ids = false;
  od::json_type type;
  if (auto ec = prompt.type().get(type)) return malformed(ec);
  if (type == od::json_type::string) {
    std::string_view s;
    if (auto ec = prompt.get_string().get(s)) return malformed(ec);
    out.prompt_text.assign(s);
    return {};
  }
  if (type != od::json_type::array) return bad("'prompt' must be a string, a list of strings or a list of token ids", "prompt");
  od::array arr;
  if (auto ec = prompt.get_array().get(arr)) return malformed(ec);
  bool strings = false, ids = false;
  for (auto item : arr) {
    od::json_type t;
    if (auto ec = item.type().get(t)) return malformed(ec);
    if (t == od::json_type::string && !ids) {
      std::string_view s;
      if (auto ec = item.get_string().get(s)) return malformed(ec);
      if (strings) out.prompt_text.push_back(' ');
      out.prompt_text.append(s);
      strings = true;
    } else if (t == od::json_type::number && !strings) {
      uint64_t id = 0;
      if (item.get_uint64().get(id) || id > UINT32_MAX) return bad("'prompt' token ids must be integers from 0 to 4294967295", "prompt");
      out.prompt_token_ids.push_back(static_cast<uint32_t>(id));
      ids = true;
    } else {
      return bad("'prompt' must be a string, a list of strings or a list of token ids", "prompt");
    }
  }
  out.has_token_ids = ids;
  return {};
}

}  // namespace

// It runs on every body, so it jumps: to the next quote or bracket with strcspn (vectorized in glibc; the
// string's terminating NUL bounds it, and a NUL inside the body is stepped over), and over a string's contents
// with memchr. About 2 us for a 256 KiB chat body, 10 us for 256 KiB of token ids (BM_JsonDepthScan; a 256 KiB
// chat parse takes about 24 us in all). Malformed text is left to the parser (an unterminated string ends the
// scan).
bool nestedDeeperThan(const std::string& json, uint32_t max_depth) {
  uint32_t depth = 0;
  const char* p = json.c_str();
  const char* const end = p + json.size();
  while (p < end) {
    p += std::strcspn(p, "\"[]{}");
    if (p >= end) break;
    const char c = *p++;
    if (c == '"') {
      for (;;) {  // to the closing quote: the first one after an even run of backslashes
        const auto* quote = static_cast<const char*>(std::memchr(p, '"', static_cast<size_t>(end - p)));
        if (quote == nullptr) return false;
        const char* run = quote;
        while (run > p && run[-1] == '\\') --run;
        p = quote + 1;
        if ((quote - run) % 2 == 0) break;
      }
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return false;
}

std::string_view endpointName(Endpoint e) {
  switch (e) {
    case Endpoint::kChatCompletions: return "chat";
    case Endpoint::kCompletions: return "completions";
    case Endpoint::kEmbeddings: return "embeddings";
    case Endpoint::kRerank: return "rerank";
    case Endpoint::kScore: return "score";
    case Endpoint::kMessages: return "messages";
    case Endpoint::kMessagesCountTokens: return "messages_count_tokens";
    case Endpoint::kResponses: return "responses";
  }
  return "unknown";
}

bool matchesPrompt(Endpoint e) {
  return e != Endpoint::kRerank && e != Endpoint::kScore && e != Endpoint::kMessagesCountTokens;
}

bool isAnthropic(Endpoint e) { return e == Endpoint::kMessages || e == Endpoint::kMessagesCountTokens; }

size_t paddingBytes() { return simdjson::SIMDJSON_PADDING; }

ParseError parseRequest(Endpoint endpoint, std::string& body, bool include_tools, uint32_t max_json_depth,
                        RequestView& out) {
  out = RequestView{};
  out.endpoint = endpoint;
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

  std::string tools;
  std::string messages_text;
  bool first_message = true;
  bool has_model = false, has_messages = false, has_prompt = false, has_input = false, has_max_completion = false;
  // Rerank's `query` and `documents`, score's `text_1` and `text_2`: their raw JSON (the engine validates their
  // forms: strings, lists, multimodal parts), kept only to size the request.
  std::string_view pair_first, pair_second;
  const bool rerank = endpoint == Endpoint::kRerank, score = endpoint == Endpoint::kScore;
  const bool anthropic = isAnthropic(endpoint), chat_like = anthropic || endpoint == Endpoint::kChatCompletions;
  const bool responses = endpoint == Endpoint::kResponses;
  // Anthropic's `system` or the Responses API's `instructions`, put in front of the messages (or input items).
  std::string system_text;
  // A key given twice counts as its last occurrence, as the engine's JSON parser (Python's) reads it: what is
  // routed on is what the engine will compute.
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
    } else if (key == "stream_options") {
      out.include_usage = false;
      od::object opts;
      if (value.get_object().get(opts)) continue;  // null or other: the engine validates it
      for (auto opt : opts) {
        std::string_view k;
        if (auto ec = opt.unescaped_key().get(k)) return malformed(ec);
        bool v = false;
        if (k == "include_usage" && !opt.value().get_bool().get(v)) out.include_usage = v;
      }
    } else if (responses ? key == "max_output_tokens" : key == "max_tokens" || key == "max_completion_tokens") {
      uint64_t n = 0;  // any other type or range: the engine validates it
      if (!value.get_uint64().get(n)) {
        const auto clamped = static_cast<uint32_t>(std::min<uint64_t>(n, UINT32_MAX));
        const bool preferred = key != "max_tokens";  // max_completion_tokens (or Responses' own) wins over max_tokens
        if (preferred || !has_max_completion) out.max_tokens = clamped;
        has_max_completion |= preferred;
      }
    } else if (key == "messages" && chat_like) {
      has_messages = true;
      messages_text.clear();
      // The text is shorter than the body (and so are the tools put in front of it): one allocation, no regrowth
      // copies of a long prompt; none when the thread has a finished request's text to spare (given back by
      // server::PreparedRequest).
      if (messages_text.capacity() < body.size()) messages_text = util::StringPool::take();
      messages_text.reserve(body.size());
      first_message = true;
      const char* start = value.raw_json_token().data();
      if (auto err = anthropic ? readAnthropicMessages(value, doc, messages_text, first_message)
                               : readMessages(value, messages_text, first_message))
        return err;
      out.raw_messages = rawSince(start, doc);
    } else if (key == "system" && anthropic) {
      if (auto err = readAnthropicSystem(value, doc, system_text)) return err;
    } else if (key == "input" && responses) {
      messages_text.clear();
      messages_text.reserve(body.size());
      const char* start = value.raw_json_token().data();
      if (auto err = body_json::readResponsesInput(value, doc, messages_text)) return err;
      out.raw_messages = rawSince(start, doc);
    } else if (key == "instructions" && responses) {
      std::string_view s;
      system_text.clear();
      if (value.get_string().get(s) == simdjson::SUCCESS) system_text.assign(s);  // null or another type: none
    } else if (key == "previous_response_id" && responses) {
      std::string_view id;
      out.previous_response_id.clear();
      if (value.get_string().get(id) == simdjson::SUCCESS && validResponseId(id)) out.previous_response_id.assign(id);
    } else if (key == "tools" && (chat_like || responses)) {
      std::string_view raw;
      if (auto ec = rawJson(value, raw)) return malformed(ec);
      tools.clear();
      if (include_tools && raw != "null") tools.assign(raw);
      out.raw_tools = raw == "null" ? std::string_view() : raw;
    } else if (key == "prompt" && endpoint == Endpoint::kCompletions) {
      has_prompt = true;
      const char* start = value.raw_json_token().data();
      if (auto err = readPrompt(value, out)) return err;
      out.raw_prompt = rawSince(start, doc);
    } else if (key == "kv_transfer_params") {
      out.has_kv_transfer_params = true;
    } else if (key == "cache_salt") {
      // Another type is the engine's to refuse; an empty salt is none (vLLM's rule).
      std::string_view salt;
      if (value.get_string().get(salt) == simdjson::SUCCESS) out.cache_salt.assign(salt);
    } else if (key == "user") {
      // OpenAI's end-user id; another type is the engine's to refuse.
      std::string_view user;
      if (value.get_string().get(user) == simdjson::SUCCESS) out.user.assign(user);
    } else if (key == "input" && endpoint == Endpoint::kEmbeddings) {
      has_input = true;
      std::string_view raw;
      if (auto ec = rawJson(value, raw)) return malformed(ec);
      out.prompt_text.assign(raw);
      out.raw_prompt = raw;
    } else if ((rerank && (key == "query" || key == "documents")) || (score && (key == "text_1" || key == "text_2"))) {
      std::string_view raw;
      if (auto ec = rawJson(value, raw)) return malformed(ec);
      if (raw == "null") raw = {};  // absent, as Python's validation reads it
      (key == "query" || key == "text_1" ? pair_first : pair_second) = raw;
    }
  }
  const char* trailing = nullptr;
  if (doc.current_location().get(trailing) == simdjson::SUCCESS)
    return bad("request body has trailing content after the JSON object");
  if (!has_model) return bad("'model' is required", "model");
  if (out.model.empty()) return bad("'model' must not be empty", "model");
  if (chat_like) {
    if (!has_messages) return bad("'messages' is required", "messages");
    // Anthropic's system prompt comes first, as a chat request's system message would.
    if (!system_text.empty()) messages_text.insert(0, system_text + " ");
    // Tools first, then the messages, so requests with the same messages but different tools differ at the start.
    if (!tools.empty()) messages_text.insert(0, tools + " ");  // within the reserved capacity: one move, no copy
    out.prompt_text = std::move(messages_text);
  }
  if (responses) {
    // `input` may be absent (a request continuing a stored response with nothing new). Units joined by one space.
    std::string& text = out.prompt_text;
    text.reserve(tools.size() + system_text.size() + messages_text.size() + 2);
    bool first = true;
    for (const std::string* unit : {&tools, &system_text, &messages_text})
      if (!unit->empty()) appendUnit(text, first, *unit);
  }
  if (endpoint == Endpoint::kCompletions && !has_prompt) return bad("'prompt' is required", "prompt");
  if (endpoint == Endpoint::kEmbeddings && !has_input) return bad("'input' is required", "input");
  if (rerank || score) {
    const char* first_name = rerank ? "query" : "text_1";
    const char* second_name = rerank ? "documents" : "text_2";
    if (pair_first.empty()) return bad(std::string("'") + first_name + "' is required", first_name);
    if (pair_second.empty()) return bad(std::string("'") + second_name + "' is required", second_name);
    out.prompt_text.reserve(pair_first.size() + 1 + pair_second.size());
    out.prompt_text.append(pair_first).append(" ").append(pair_second);
  }
  return {};
}

}  // namespace prefixgate::openai
