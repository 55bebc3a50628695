#include "tokenize/tokenize_protocol.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>

namespace prefixgate::tokenize {
namespace {

using engine::EngineKind;

constexpr int kMaxSkipDepth = 64;
constexpr uint64_t kMaxTokenId = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kChatSeed = 0x6368617400000001ULL;        // "chat"
constexpr uint64_t kCompletionSeed = 0x636d706c00000002ULL;  // "cmpl"

// A strict reader for the small answer shapes of /tokenize and /apply-template. A general JSON library costs about
// 1 ms for a 10,000-token answer (each id becomes a variant); this reads the ids straight into the vector.
class Reader {
 public:
  explicit Reader(std::string_view text) : p_(text.data()), end_(text.data() + text.size()) {}

  void ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool eat(char c) {
    ws();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    return false;
  }
  bool atEnd() {
    ws();
    return p_ == end_;
  }
  char peek() {
    ws();
    return p_ < end_ ? *p_ : '\0';
  }

  // A string's raw content (escapes left as they are), checked as strictString checks it: an answer the gateway
  // accepts is one any JSON parser accepts, keys and skipped values included.
  bool string(std::string_view& raw) {
    std::string_view literal;
    if (!strictString(literal)) return false;
    raw = literal.substr(1, literal.size() - 2);
    return true;
  }

  // A string checked as a strict JSON parser decodes it (RFC 8259 escapes, surrogates paired, RFC 3629 UTF-8);
  // `literal` is its JSON text, quotes included.
  bool strictString(std::string_view& literal) {
    ws();
    if (p_ == end_ || *p_ != '"') return false;
    const char* start = p_++;
    while (p_ < end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        literal = std::string_view(start, p_ - start);
        return true;
      }
      if (c < 0x20) return false;
      if (c == '\\') {
        if (!escape()) return false;
      } else if (c < 0x80) {
        ++p_;
      } else if (!utf8Sequence()) {
        return false;
      }
    }
    return false;
  }

  // A whole number without sign, fraction or exponent, up to `max`.
  bool wholeNumber(uint64_t& value, uint64_t max) {
    ws();
    const char* start = p_;
    value = 0;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
      const uint64_t digit = static_cast<uint64_t>(*p_ - '0');
      if (value > (max - digit) / 10) return false;
      value = value * 10 + digit;
      ++p_;
    }
    if (p_ == start || (*start == '0' && p_ - start > 1)) return false;
    return p_ == end_ || (*p_ != '.' && *p_ != 'e' && *p_ != 'E');
  }

  // Any JSON integer (a sign, no fraction or exponent, any size); `value` is set when it is from 0 to `max`, else
  // `in_range` is false.
  bool integer(uint64_t& value, bool& in_range, uint64_t max) {
    ws();
    const bool negative = p_ < end_ && *p_ == '-';
    if (negative) ++p_;
    const char* start = p_;
    value = 0;
    in_range = !negative;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
      const uint64_t digit = static_cast<uint64_t>(*p_ - '0');
      if (in_range && value > (max - digit) / 10) in_range = false;
      if (in_range) value = value * 10 + digit;
      ++p_;
    }
    if (p_ == start || (*start == '0' && p_ - start > 1)) return false;
    if (negative && p_ - start == 1 && *start == '0') in_range = true;  // -0
    return p_ == end_ || (*p_ != '.' && *p_ != 'e' && *p_ != 'E');
  }

  // A JSON number as RFC 8259 writes it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number() {
    auto digits = [this] {
      const char* start = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      return p_ - start;
    };
    if (p_ < end_ && *p_ == '-') ++p_;
    const char* int_start = p_;
    const auto int_digits = digits();
    if (int_digits == 0 || (*int_start == '0' && int_digits > 1)) return false;
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      if (digits() == 0) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (digits() == 0) return false;
    }
    return true;
  }

  // Any JSON value, checked for shape but not kept.
  bool skipValue(int depth = 0) {
    if (depth > kMaxSkipDepth) return false;
    const char c = peek();
    std::string_view ignored;
    if (c == '"') return string(ignored);
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++p_;
      if (eat(close)) return true;
      do {
        if (c == '{' && (!string(ignored) || !eat(':'))) return false;
        if (!skipValue(depth + 1)) return false;
      } while (eat(','));
      return eat(close);
    }
    for (std::string_view word : {"true", "false", "null"}) {
      if (std::string_view(p_, end_ - p_).starts_with(word)) {
        p_ += word.size();
        return true;
      }
    }
    return number();
  }

 private:
  bool hex4(uint32_t& value) {
    if (end_ - p_ < 4) return false;
    value = 0;
    for (int i = 0; i < 4; ++i, ++p_) {
      const char c = *p_;
      int digit = -1;
      if (c >= '0' && c <= '9') digit = c - '0';
      else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
      if (digit < 0) return false;
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    return true;
  }

  // At a backslash: one escape; a high surrogate must be followed by an escaped low one (a JSON parser refuses a
  // lone surrogate: it is no character).
  bool escape() {
    if (++p_ == end_) return false;
    switch (*p_++) {
      case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': return true;
      case 'u': break;
      default: return false;
    }
    uint32_t unit = 0;
    if (!hex4(unit) || (unit >= 0xDC00 && unit <= 0xDFFF)) return false;
    if (unit < 0xD800 || unit > 0xDBFF) return true;
    uint32_t low = 0;
    if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return false;
    p_ += 2;
    return hex4(low) && low >= 0xDC00 && low <= 0xDFFF;
  }

  // At a byte >= 0x80: one well-formed UTF-8 sequence (no overlong forms, surrogates or code points past U+10FFFF).
  bool utf8Sequence() {
    const auto lead = static_cast<unsigned char>(*p_);
    int continuation = 0;
    unsigned char low = 0x80, high = 0xBF;  // the second byte's range
    if (lead >= 0xC2 && lead <= 0xDF) continuation = 1;
    else if (lead == 0xE0) continuation = 2, low = 0xA0;
    else if (lead == 0xED) continuation = 2, high = 0x9F;
    else if (lead >= 0xE1 && lead <= 0xEF) continuation = 2;
    else if (lead == 0xF0) continuation = 3, low = 0x90;
    else if (lead >= 0xF1 && lead <= 0xF3) continuation = 3;
    else if (lead == 0xF4) continuation = 3, high = 0x8F;
    else return false;
    if (end_ - p_ <= continuation) return false;
    const auto second = static_cast<unsigned char>(p_[1]);
    if (second < low || second > high) return false;
    for (int i = 2; i <= continuation; ++i)
      if ((static_cast<unsigned char>(p_[i]) & 0xC0) != 0x80) return false;
    p_ += continuation + 1;
    return true;
  }

  const char* p_;
  const char* end_;
};

bool fail(std::string& error, std::string what) {
  error = std::move(what);
  return false;
}

// `raw` (a value's JSON text) is a string, not a list.
bool isJsonString(std::string_view raw) {
  const size_t first = raw.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && raw[first] == '"';
}

void appendModel(std::string& body, std::string_view model) {
  body.append(R"({"model":)")
      .append(nlohmann::json(std::string(model)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

constexpr size_t kBodyFraming = 96;  // the keys and flags around the raw fields

// Orders [first, last) by load, the least-loaded ones rotated (see orderTokenizerPods).
void orderByLoad(std::vector<TokenizerPod>::iterator first, std::vector<TokenizerPod>::iterator last,
                 uint64_t rotation) {
  if (first == last) return;
  auto byLoad = [](const TokenizerPod& a, const TokenizerPod& b) { return a.load < b.load; };
  std::stable_sort(first, last, byLoad);
  const auto least = std::find_if(first, last, [&](const TokenizerPod& p) { return byLoad(*first, p); });
  const auto ties = static_cast<uint64_t>(least - first);
  std::rotate(first, first + static_cast<std::ptrdiff_t>(rotation % ties), least);
}

}  // namespace

std::string_view unsupportedReason(EngineKind dialect, const TokenizeInput& input) {
  switch (spokenDialect(dialect)) {
    case EngineKind::kSglang:
      if (input.chat) return "SGLang's /tokenize has no chat form";
      if (!isJsonString(input.prompt)) return "SGLang tokenizes a list of prompts as separate sequences";
      return "";
    case EngineKind::kLlamaCpp:
      if (!input.chat && !isJsonString(input.prompt))
        return "llama.cpp's /tokenize would join a list of prompts into one sequence (its completions take each on "
               "its own)";
      return "";
    case EngineKind::kVllm:
    case EngineKind::kAuto: break;
  }
  return "";
}

std::string buildTokenizeBody(const TokenizeInput& input, EngineKind dialect) {
  if (spokenDialect(dialect) == EngineKind::kLlamaCpp) return buildLlamaCppTokenizeBody(input.model, input.prompt);
  // vLLM's forms; SGLang takes the completion form as it is (its TokenizeRequest: model, prompt,
  // add_special_tokens), and is never asked a chat request (unsupportedReason).
  std::string body;
  body.reserve(input.model.size() + input.messages.size() + input.tools.size() + input.prompt.size() + kBodyFraming);
  appendModel(body, input.model);
  if (input.chat) {
    body.append(R"(,"messages":)").append(input.messages);
    if (!input.tools.empty()) body.append(R"(,"tools":)").append(input.tools);
    body.append(R"(,"add_generation_prompt":true,"add_special_tokens":false})");
  } else {
    body.append(R"(,"prompt":)").append(input.prompt);
    body.append(R"(,"add_special_tokens":true})");
  }
  return body;
}

std::string buildApplyTemplateBody(const TokenizeInput& input) {
  // add_generation_prompt is left to the server's default (true), as the chat request that carries none leaves it.
  std::string body;
  body.reserve(input.model.size() + input.messages.size() + input.tools.size() + kBodyFraming);
  appendModel(body, input.model);
  body.append(R"(,"messages":)").append(input.messages);
  if (!input.tools.empty()) body.append(R"(,"tools":)").append(input.tools);
  body.push_back('}');
  return body;
}

std::string buildLlamaCppTokenizeBody(std::string_view model, std::string_view content) {
  // llama.cpp's completion, chat and embedding endpoints tokenize their prompt with add_special and parse_special
  // both true (tokenize_input_prompts(..., true, true) in handle_completions_impl); /tokenize defaults
  // add_special to false, so both are sent.
  std::string body;
  body.reserve(model.size() + content.size() + kBodyFraming);
  appendModel(body, model);
  body.append(R"(,"content":)").append(content);
  body.append(R"(,"add_special":true,"parse_special":true})");
  return body;
}

bool parseApplyTemplateAnswer(std::string_view body, std::string_view& prompt, std::string& error) {
  Reader r(body);
  if (!r.eat('{')) return fail(error, "the answer is not a JSON object");
  bool has_prompt = false;
  if (!r.eat('}')) {
    do {
      std::string_view key;
      if (!r.string(key) || !r.eat(':')) return fail(error, "the answer is not valid JSON");
      if (key == "prompt") {
        if (has_prompt) return fail(error, "'prompt' appears twice");
        has_prompt = true;
        if (!r.strictString(prompt))
          return fail(error, "'prompt' must be a JSON string (valid escapes, paired surrogates, UTF-8)");
      } else if (!r.skipValue()) {
        return fail(error, "the answer is not valid JSON");
      }
    } while (r.eat(','));
    if (!r.eat('}')) return fail(error, "the answer is not valid JSON");
  }
  if (!r.atEnd()) return fail(error, "the answer has bytes after its JSON object");
  if (!has_prompt) return fail(error, "'prompt' is missing");
  return true;
}

uint64_t tokenizeCacheKey(const TokenizeInput& input) {
  uint64_t h = XXH64(input.model.data(), input.model.size(), input.chat ? kChatSeed : kCompletionSeed);
  if (input.chat) {
    h = XXH64(input.messages.data(), input.messages.size(), h);
    h = XXH64(input.tools.data(), input.tools.size(), h);
  } else {
    h = XXH64(input.prompt.data(), input.prompt.size(), h);
  }
  return h;
}

bool parseTokenizeAnswer(std::string_view body, TokenizeAnswer& out, std::string& error, EngineKind dialect) {
  dialect = spokenDialect(dialect);
  const bool count_required = dialect != EngineKind::kLlamaCpp;
  const bool any_max_len = dialect == EngineKind::kSglang;
  out.tokens.clear();
  out.max_model_len = 0;
  Reader r(body);
  if (!r.eat('{')) return fail(error, "the answer is not a JSON object");
  bool has_count = false, has_tokens = false, has_max_len = false;
  uint64_t count = 0;
  if (!r.eat('}')) {
    do {
      std::string_view key;
      if (!r.string(key) || !r.eat(':')) return fail(error, "the answer is not valid JSON");
      if (key == "count" || key == "max_model_len") {
        bool& seen = key == "count" ? has_count : has_max_len;
        if (seen) return fail(error, "'" + std::string(key) + "' appears twice");
        seen = true;
        uint64_t value = 0;
        bool in_range = true;
        if (key == "max_model_len" && any_max_len) {
          if (!r.integer(value, in_range, kMaxTokenId)) return fail(error, "'max_model_len' must be an integer");
        } else if (!r.wholeNumber(value, kMaxTokenId)) {
          return fail(error, "'" + std::string(key) + "' must be a whole number from 0 to 4294967295");
        }
        if (key == "count") count = value;
        else out.max_model_len = in_range ? static_cast<uint32_t>(value) : 0;
      } else if (key == "tokens") {
        if (has_tokens) return fail(error, "'tokens' appears twice");
        has_tokens = true;
        if (!r.eat('[')) return fail(error, "'tokens' must be an array of token ids");
        if (!r.eat(']')) {
          do {
            uint64_t id = 0;
            if (!r.wholeNumber(id, kMaxTokenId))
              return fail(error, "'tokens' must hold whole numbers from 0 to 4294967295 (entry " +
                                     std::to_string(out.tokens.size()) + ")");
            out.tokens.push_back(static_cast<uint32_t>(id));
          } while (r.eat(','));
          if (!r.eat(']')) return fail(error, "'tokens' must be an array of token ids");
        }
      } else if (!r.skipValue()) {
        return fail(error, "the answer is not valid JSON");
      }
    } while (r.eat(','));
    if (!r.eat('}')) return fail(error, "the answer is not valid JSON");
  }
  if (!r.atEnd()) return fail(error, "the answer has bytes after its JSON object");
  if (!has_tokens) return fail(error, "'tokens' is missing");
  if (!has_count && count_required) return fail(error, "'count' is missing");
  if (has_count && count != out.tokens.size())
    return fail(error, "'count' (" + std::to_string(count) + ") is not the number of tokens (" +
                           std::to_string(out.tokens.size()) + ")");
  return true;
}

void orderTokenizerPods(std::vector<TokenizerPod>& pods, uint64_t rotation) {
  orderByLoad(pods.begin(), pods.end(), rotation);
}

size_t orderTokenizerPods(std::vector<TokenizerPod>& pods, const TokenizeInput& input, uint64_t rotation) {
  // 0: a known dialect that can; 1: not known yet (spoken to as vLLM: a guess); 2: a dialect that cannot.
  auto tier = [&input](const TokenizerPod& pod) {
    if (!unsupportedReason(pod.engine, input).empty()) return 2;
    return pod.engine == engine::EngineKind::kAuto ? 1 : 0;
  };
  if (pods.empty()) return 0;
  // The usual fleet: one tier (every pod of the model speaks one dialect), ordered as before.
  const int first_tier = tier(pods.front());
  if (std::all_of(pods.begin() + 1, pods.end(), [&](const TokenizerPod& p) { return tier(p) == first_tier; })) {
    orderByLoad(pods.begin(), pods.end(), rotation);
    return first_tier == 2 ? 0 : pods.size();
  }
  std::stable_sort(pods.begin(), pods.end(),
                   [&](const TokenizerPod& a, const TokenizerPod& b) { return tier(a) < tier(b); });
  size_t askable = 0;
  for (auto group = pods.begin(); group != pods.end();) {
    const int t = tier(*group);
    const auto end = std::find_if(group, pods.end(), [&](const TokenizerPod& p) { return tier(p) != t; });
    orderByLoad(group, end, rotation);
    if (t < 2) askable += static_cast<size_t>(end - group);
    group = end;
  }
  return askable;
}

}  // namespace prefixgate::tokenize
