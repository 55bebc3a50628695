#pragma once
// vLLM's cross-encoder endpoints as pure functions (no sockets): POST /v1/rerank and /v2/rerank ({"model", "query",
// "documents", "top_n"}) and POST /v1/score ({"model", "text_1", "text_2"}), validated into the (query, document)
// pairs a cross-encoder scores, each pair's deterministic relevance, and the answers in vLLM's shapes. The server
// prefills every pair's tokens as one prompt-only sequence (as embeddings), so these requests load the engine.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_sim/prompt.h"
#include "engine_sim/request_handlers.h"
#include "engine_sim/sim_config.h"

namespace prefixgate::sim {

struct ScoringRequest {
  std::string model;
  // One query per document (a single query is repeated), documents in the order given.
  std::vector<Prompt> queries;
  std::vector<Prompt> documents;
  uint32_t top_n = 0;  // rerank: how many results to return, best first (0 = all)
  uint64_t tokens() const;  // every pair's query and document tokens
};

// Rerank: "query" a string, "documents" a non-empty list of strings, "top_n" absent, null or a non-negative integer.
Parsed<ScoringRequest> parseRerankRequest(const SimConfig& config, std::string_view body);
// Score: "text_1" and "text_2" each a string or a non-empty list of strings; one text_1 is paired with every text_2,
// else the lists pair up one to one (their lengths must match), as vLLM's _validate_score_input does.
Parsed<ScoringRequest> parseScoreRequest(const SimConfig& config, std::string_view body);

// A pair's relevance in (0, 1): a digest of the query's and the document's tokens, so the same pair always scores
// the same on every pod.
double pairScore(const Prompt& query, const Prompt& document);

// {"id", "model", "usage": {"total_tokens"}, "results": [{"index", "document": {"text"}, "relevance_score"}]}:
// results sorted by score (highest first, ties by index), cut to top_n when it is set.
nlohmann::json rerankResponse(const std::string& id, const ScoringRequest& request, const std::vector<double>& scores);
// {"id", "object": "list", "created", "model", "data": [{"index", "object": "score", "score"}], "usage"}, in the
// pairs' order.
nlohmann::json scoreResponse(const std::string& id, int64_t created, const ScoringRequest& request,
                             const std::vector<double>& scores);

}  // namespace prefixgate::sim
