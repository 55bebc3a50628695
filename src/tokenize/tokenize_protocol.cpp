#include "tokenize/tokenize_protocol.h"

#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>

namespace prefixgate::tokenize {
namespace {

constexpr int kMaxSkipDepth = 64;
constexpr uint64_t kMaxTokenId = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kChatSeed = 0x6368617400000001ULL;        // "chat"
constexpr uint64_t kCompletionSeed = 0x636d706c00000002ULL;  // "cmpl"

// A strict reader for the one small answer shape /tokenize has. A general JSON library costs about 1 ms for a
// 10,000-token answer (each id becomes a variant); this reads the ids straight into the vector.
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

  // A string's raw content (escapes left as they are, but well-formed).
  bool string(std::string_view& raw) {
    if (!eat('"')) return false;
    const char* start = p_;
    while (p_ < end_ && *p_ != '"') {
      if (static_cast<unsigned char>(*p_) < 0x20) return false;
      if (*p_ == '\\' && ++p_ == end_) return false;
      ++p_;
    }
    if (p_ == end_) return false;
    raw = std::string_view(start, p_ - start);
    ++p_;
    return true;
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
    const char* start = p_;
    while (p_ < end_ && (std::isdigit(static_cast<unsigned char>(*p_)) || *p_ == '-' || *p_ == '+' || *p_ == '.' ||
                         *p_ == 'e' || *p_ == 'E'))
      ++p_;
    return p_ > start;
  }

 private:
  const char* p_;
  const char* end_;
};

bool fail(std::string& error, std::string what) {
  error = std::move(what);
  return false;
}

}  // namespace

std::string buildTokenizeBody(const TokenizeInput& input) {
  const std::string model =
      nlohmann::json(std::string(input.model)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string body;
  body.reserve(model.size() + input.messages.size() + input.tools.size() + input.prompt.size() + 96);
  body.append(R"({"model":)").append(model);
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

bool parseTokenizeAnswer(std::string_view body, TokenizeAnswer& out, std::string& error) {
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
        if (!r.wholeNumber(value, kMaxTokenId))
          return fail(error, "'" + std::string(key) + "' must be a whole number from 0 to 4294967295");
        if (key == "count") count = value;
        else out.max_model_len = static_cast<uint32_t>(value);
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
  if (!has_count) return fail(error, "'count' is missing");
  if (count != out.tokens.size())
    return fail(error, "'count' (" + std::to_string(count) + ") is not the number of tokens (" +
                           std::to_string(out.tokens.size()) + ")");
  return true;
}

void orderTokenizerPods(std::vector<TokenizerPod>& pods, uint64_t rotation) {
  auto byLoad = [](const TokenizerPod& a, const TokenizerPod& b) { return a.load < b.load; };
  std::stable_sort(pods.begin(), pods.end(), byLoad);
  if (pods.empty()) return;
  const auto least = std::find_if(pods.begin(), pods.end(), [&](const TokenizerPod& p) { return byLoad(pods[0], p); });
  const auto ties = static_cast<uint64_t>(least - pods.begin());
  std::rotate(pods.begin(), pods.begin() + static_cast<std::ptrdiff_t>(rotation % ties), least);
}

}  // namespace prefixgate::tokenize
