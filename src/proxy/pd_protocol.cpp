#include "proxy/pd_protocol.h"

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <vector>

namespace prefixgate::proxy::pd {
namespace {

// Where one top-level member lies in the text. Its segment runs from just after the '{' or ',' before it to the ',' or
// '}' after it, whitespace included, so that a kept member is copied exactly as sent.
struct Member {
  std::string_view raw_key;  // between the quotes, escapes as written
  size_t seg_begin = 0;
  size_t value_begin = 0;
  size_t value_end = 0;
  size_t seg_end = 0;
};

struct ObjectLayout {
  size_t open = 0;   // the '{'
  size_t close = 0;  // the matching '}'
  std::vector<Member> members;
};

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skipSpace(std::string_view s, size_t i) {
  while (i < s.size() && isSpace(s[i])) ++i;
  return i;
}

// From an opening quote to just past its closing quote; npos when unterminated. A backslash always takes the next
// character, so \" and \u0022 never end the string.
size_t skipString(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

bool isScalarChar(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '+' || c == '.';
}

// Past one value starting at i; npos when malformed. Nesting is followed with an explicit stack of expected closers
// (no recursion, so depth cannot overflow the call stack) and a closer of the wrong kind is an error, so a value's span
// can never end inside another value.
size_t skipValue(std::string_view s, size_t i) {
  if (i >= s.size()) return std::string_view::npos;
  if (s[i] == '"') return skipString(s, i);
  if (s[i] != '{' && s[i] != '[') {
    size_t end = i;
    while (end < s.size() && isScalarChar(s[end])) ++end;
    return end == i ? std::string_view::npos : end;
  }
  std::string closers;
  while (i < s.size()) {
    char c = s[i];
    if (c == '"') {
      i = skipString(s, i);
      if (i == std::string_view::npos) return i;
      continue;
    }
    if (c == '{') closers.push_back('}');
    if (c == '[') closers.push_back(']');
    if (c == '}' || c == ']') {
      if (closers.back() != c) return std::string_view::npos;
      closers.pop_back();
      if (closers.empty()) return i + 1;
    }
    ++i;
  }
  return std::string_view::npos;
}

// One member at i (just after '{' or ','); fills `m` and returns the position of the ',' or '}' that ends it.
std::optional<size_t> scanMember(std::string_view s, size_t i, Member& m) {
  m.seg_begin = i;
  size_t key = skipSpace(s, i);
  if (key >= s.size() || s[key] != '"') return std::nullopt;
  size_t key_end = skipString(s, key);
  if (key_end == std::string_view::npos) return std::nullopt;
  m.raw_key = s.substr(key + 1, key_end - key - 2);
  size_t colon = skipSpace(s, key_end);
  if (colon >= s.size() || s[colon] != ':') return std::nullopt;
  m.value_begin = skipSpace(s, colon + 1);
  m.value_end = skipValue(s, m.value_begin);
  if (m.value_end == std::string_view::npos) return std::nullopt;
  m.seg_end = skipSpace(s, m.value_end);
  if (m.seg_end >= s.size() || (s[m.seg_end] != ',' && s[m.seg_end] != '}')) return std::nullopt;
  return m.seg_end;
}

// The top-level members of a JSON object text; an error message when the text is not one object.
std::optional<ObjectLayout> scanObject(std::string_view s, std::string& error) {
  ObjectLayout layout;
  layout.open = skipSpace(s, 0);
  if (layout.open >= s.size() || s[layout.open] != '{') {
    error = "body is not a JSON object";
    return std::nullopt;
  }
  size_t i = layout.open + 1;
  if (size_t first = skipSpace(s, i); first < s.size() && s[first] == '}') {
    layout.close = first;
  } else {
    while (true) {
      Member m;
      auto end = scanMember(s, i, m);
      if (!end) {
        error = "malformed JSON object member at byte " + std::to_string(i);
        return std::nullopt;
      }
      layout.members.push_back(m);
      if (s[*end] == '}') {
        layout.close = *end;
        break;
      }
      i = *end + 1;
    }
  }
  if (skipSpace(s, layout.close + 1) != s.size()) {
    error = "text after the JSON object";
    return std::nullopt;
  }
  return layout;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Whether a key as written (escapes undone) is `name`, an ASCII name: "\u0073tream" is "stream" to every JSON parser,
// so it must be to us, or a client could slip a second `stream` past the edit.
bool keyIs(std::string_view raw, std::string_view name) {
  size_t n = 0;
  for (size_t i = 0; i < raw.size(); ++i, ++n) {
    char c = raw[i];
    if (c == '\\') {
      if (i + 1 >= raw.size()) return false;
      char e = raw[++i];
      if (e == 'u') {
        if (i + 4 >= raw.size()) return false;
        int code = 0;
        for (int k = 1; k <= 4; ++k) {
          int h = hexValue(raw[i + k]);
          if (h < 0) return false;
          code = code * 16 + h;
        }
        i += 4;
        if (code >= 0x80) return false;  // cannot be part of an ASCII name
        c = static_cast<char>(code);
      } else {
        static constexpr std::string_view kFrom = "\"\\/bfnrt", kTo = "\"\\/\b\f\n\r\t";
        size_t at = kFrom.find(e);
        if (at == std::string_view::npos) return false;
        c = kTo[at];
      }
    }
    if (n >= name.size() || name[n] != c) return false;
  }
  return n == name.size();
}

bool keyIsAny(std::string_view raw, std::initializer_list<std::string_view> names) {
  for (auto name : names)
    if (keyIs(raw, name)) return true;
  return false;
}

// The body less the members `drop` names, with `appended` (members text, no leading comma) added last. Kept members are
// copied with their surrounding whitespace; the last one's trailing whitespace moves after the new members.
template <typename Drop>
std::string splice(std::string_view s, const ObjectLayout& layout, Drop drop, std::string_view appended) {
  std::string out;
  out.reserve(s.size() + appended.size() + 1);
  out.append(s.substr(0, layout.open + 1));
  const Member* last_kept = nullptr;
  for (const Member& m : layout.members) {
    if (drop(m.raw_key)) continue;
    if (last_kept) out.push_back(',');
    out.append(s.substr(m.seg_begin, m.value_end - m.seg_begin));
    last_kept = &m;
  }
  if (!appended.empty()) {
    if (last_kept) out.push_back(',');
    out.append(appended);
  }
  if (last_kept) out.append(s.substr(last_kept->value_end, last_kept->seg_end - last_kept->value_end));
  out.append(s.substr(layout.close));
  return out;
}

constexpr std::string_view kKvTransferParams = "kv_transfer_params";
constexpr std::string_view kMaxCompletionTokens = "max_completion_tokens";

// Asks the prefill pod to compute the prompt's blocks and hold them for a remote decode; the nulls are the fields the
// prefill pod fills in its answer (key for key as vLLM's proxy sends them).
constexpr std::string_view kPrefillKvTransferParams =
    R"("kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,)"
    R"("remote_block_ids":null,"remote_host":null,"remote_port":null})";

}  // namespace

std::string prefillerHostPort(std::string_view host, uint16_t port) {
  bool bracket = host.find(':') != std::string_view::npos && !host.starts_with('[');
  std::string out;
  if (bracket) out.push_back('[');
  out.append(host);
  if (bracket) out.push_back(']');
  out.push_back(':');
  out.append(std::to_string(port));
  return out;
}

BodyEdit prefillBody(std::string_view body) {
  BodyEdit result;
  auto layout = scanObject(body, result.error);
  if (!layout) return result;
  bool had_max_completion_tokens = false;
  for (const Member& m : layout->members) had_max_completion_tokens |= keyIs(m.raw_key, kMaxCompletionTokens);
  std::string appended = R"("stream":false,"max_tokens":1,)";
  if (had_max_completion_tokens) appended += R"("max_completion_tokens":1,)";
  appended += kPrefillKvTransferParams;
  auto drop = [](std::string_view key) {
    return keyIsAny(key, {kKvTransferParams, "stream", "stream_options", "max_tokens", kMaxCompletionTokens,
                          "min_tokens", "min_completion_tokens"});
  };
  result.body = splice(body, *layout, drop, appended);
  return result;
}

BodyEdit decodeBody(std::string_view body, std::string_view kv_transfer_params_json) {
  BodyEdit result;
  std::string appended;
  if (!kv_transfer_params_json.empty()) {
    std::string params_error;
    if (!scanObject(kv_transfer_params_json, params_error)) {
      result.error = "kv_transfer_params: " + params_error;
      return result;
    }
    appended.append("\"").append(kKvTransferParams).append("\":").append(kv_transfer_params_json);
  }
  auto layout = scanObject(body, result.error);
  if (!layout) return result;
  result.body = splice(body, *layout, [](std::string_view key) { return keyIs(key, kKvTransferParams); }, appended);
  return result;
}

KvTransferParams extractKvTransferParams(std::string_view answer_body, size_t max_bytes) {
  KvTransferParams result;
  std::string error;
  auto layout = scanObject(answer_body, error);
  if (!layout) {
    result.absent_reason = "prefill answer: " + error;
    return result;
  }
  const Member* found = nullptr;
  for (const Member& m : layout->members)
    if (keyIs(m.raw_key, kKvTransferParams)) found = &m;
  if (!found) {
    result.absent_reason = "prefill answer has no kv_transfer_params";
    return result;
  }
  std::string_view value = answer_body.substr(found->value_begin, found->value_end - found->value_begin);
  if (value == "null") {
    result.absent_reason = "prefill answer's kv_transfer_params is null";
  } else if (value.front() != '{') {
    result.absent_reason = "prefill answer's kv_transfer_params is not an object";
  } else if (value.size() > max_bytes) {
    result.absent_reason = "prefill answer's kv_transfer_params is " + std::to_string(value.size()) +
                           " bytes, over the limit of " + std::to_string(max_bytes);
  } else if (!nlohmann::json::accept(value.begin(), value.end())) {
    // Checked before copying: the text goes verbatim into the decode body.
    result.absent_reason = "prefill answer's kv_transfer_params is not valid JSON";
  } else if (skipSpace(value, 1) == value.size() - 1) {
    // vLLM's proxy treats an empty object like a missing one.
    result.absent_reason = "prefill answer's kv_transfer_params is empty";
  } else {
    result.json.assign(value);
  }
  return result;
}

}  // namespace prefixgate::proxy::pd
