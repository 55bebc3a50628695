#include "engine_sim/scoring.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

Prompt textPrompt(const std::string& text) { return Prompt{text, tokenize(text)}; }

// A string or a non-empty list of strings into `out`; false (with `error`) for anything else.
bool readTexts(const json& body, const char* key, bool list_allowed, std::vector<Prompt>& out, std::string& error) {
  auto it = body.find(key);
  const std::string expected = list_allowed ? "a string or a non-empty list of strings" : "a string";
  if (it == body.end() || it->is_null()) {
    error = fmt::format("'{}' is required: {}", key, expected);
    return false;
  }
  if (it->is_string()) {
    out.push_back(textPrompt(it->get<std::string>()));
    return true;
  }
  if (list_allowed && it->is_array() && !it->empty() &&
      std::all_of(it->begin(), it->end(), [](const json& item) { return item.is_string(); })) {
    for (const json& item : *it) out.push_back(textPrompt(item.get<std::string>()));
    return true;
  }
  error = fmt::format("'{}' must be {}", key, expected);
  return false;
}

Parsed<ScoringRequest> parseWith(const SimConfig& config, std::string_view body, const char* first, const char* second,
                                 bool rerank) {
  Parsed<ScoringRequest> parsed;
  const json doc = json::parse(body.begin(), body.end(), nullptr, false);
  parsed.status = checkModel(config, doc, parsed.request.model, parsed.error);
  if (!parsed.ok()) return parsed;
  ScoringRequest& r = parsed.request;
  parsed.status = 400;
  if (!readTexts(doc, first, !rerank, r.queries, parsed.error)) return parsed;
  if (!readTexts(doc, second, true, r.documents, parsed.error)) return parsed;
  if (rerank && doc.at(second).is_string()) {
    parsed.error = fmt::format("'{}' must be a non-empty list of strings", second);
    return parsed;
  }
  if (r.queries.size() == 1) {
    const Prompt query = r.queries.front();
    r.queries.assign(r.documents.size(), query);
  } else if (r.queries.size() != r.documents.size()) {
    parsed.error = fmt::format("'{}' and '{}' must have the same number of texts ({} and {})", first, second,
                               r.queries.size(), r.documents.size());
    return parsed;
  }
  if (auto it = doc.find("top_n"); rerank && it != doc.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > UINT32_MAX) {
      parsed.error = "'top_n' must be a non-negative integer";
      return parsed;
    }
    r.top_n = static_cast<uint32_t>(it->get<int64_t>());
  }
  for (size_t i = 0; i < r.documents.size(); ++i) {
    const size_t tokens = r.queries[i].tokens.size() + r.documents[i].tokens.size();
    if (tokens > config.max_model_len) {
      parsed.error = fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                 "tokens in the input for pair {}.",
                                 config.max_model_len, tokens, i);
      return parsed;
    }
  }
  parsed.status = 0;
  return parsed;
}

json usageOf(const ScoringRequest& request) {
  const uint64_t tokens = request.tokens();
  return json{{"prompt_tokens", tokens}, {"total_tokens", tokens}, {"completion_tokens", 0},
              {"prompt_tokens_details", nullptr}};
}

}  // namespace

uint64_t ScoringRequest::tokens() const {
  uint64_t total = 0;
  for (size_t i = 0; i < documents.size(); ++i) total += queries[i].tokens.size() + documents[i].tokens.size();
  return total;
}

Parsed<ScoringRequest> parseRerankRequest(const SimConfig& config, std::string_view body) {
  return parseWith(config, body, "query", "documents", true);
}

Parsed<ScoringRequest> parseScoreRequest(const SimConfig& config, std::string_view body) {
  return parseWith(config, body, "text_1", "text_2", false);
}

double pairScore(const Prompt& query, const Prompt& document) {
  std::vector<uint32_t> both = query.tokens;
  both.push_back(specialTokenId("<|sep|>"));  // ("ab", "c") and ("a", "bc") are different pairs
  both.insert(both.end(), document.tokens.begin(), document.tokens.end());
  // 53 bits of the digest: a double in [0, 1), moved off 0 so every score is a probability a sigmoid could give.
  const double unit = static_cast<double>(tokensDigest(both) >> 11) / static_cast<double>(uint64_t{1} << 53);
  return 0.001 + unit * 0.998;
}

json rerankResponse(const std::string& id, const ScoringRequest& request, const std::vector<double>& scores) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (request.top_n > 0 && request.top_n < order.size()) order.resize(request.top_n);
  json results = json::array();
  for (size_t i : order)
    results.push_back(json{{"index", i}, {"document", {{"text", request.documents[i].text}}},
                           {"relevance_score", scores[i]}});
  return json{{"id", id},
              {"model", request.model},
              {"usage", {{"total_tokens", request.tokens()}}},
              {"results", std::move(results)}};
}

json scoreResponse(const std::string& id, int64_t created, const ScoringRequest& request,
                   const std::vector<double>& scores) {
  json data = json::array();
  for (size_t i = 0; i < scores.size(); ++i) data.push_back(json{{"index", i}, {"object", "score"}, {"score", scores[i]}});
  return json{{"id", id},       {"object", "list"},      {"created", created},
              {"model", request.model}, {"data", std::move(data)}, {"usage", usageOf(request)}};
}

}  // namespace prefixgate::sim
