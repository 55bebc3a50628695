// The simulator's rerank and score endpoints: validation into pairs, deterministic scores, vLLM's answer shapes.
#include "engine_sim/scoring.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace prefixgate::sim {
namespace {

using nlohmann::json;

SimConfig oneModel() {
  SimConfig config;
  config.models = {"ranker"};
  return config;
}

// Ensures rerank pairs the query with every document, honours top_n and answers sorted by score, best first.
TEST(SimScoring, RerankSortsAndCuts) {
  auto parsed = parseRerankRequest(
      oneModel(), R"({"model":"ranker","query":"what is a cache","documents":["a","bb","ccc","dddd"],"top_n":2})");
  ASSERT_TRUE(parsed.ok()) << parsed.error;
  ASSERT_EQ(parsed.request.documents.size(), 4u);
  std::vector<double> scores;
  for (size_t i = 0; i < 4; ++i) scores.push_back(pairScore(parsed.request.queries[i], parsed.request.documents[i]));
  json answer = rerankResponse("rerank-1", parsed.request, scores);
  EXPECT_EQ(answer["model"], "ranker");
  EXPECT_EQ(answer["usage"]["total_tokens"], parsed.request.tokens());
  ASSERT_EQ(answer["results"].size(), 2u);
  const json& best = answer["results"][0];
  EXPECT_GE(best["relevance_score"].get<double>(), answer["results"][1]["relevance_score"].get<double>());
  const size_t index = best["index"].get<size_t>();
  EXPECT_EQ(best["document"]["text"], parsed.request.documents[index].text);
  for (double s : scores) EXPECT_LE(s, best["relevance_score"].get<double>());
}

// Ensures the same pair scores the same, different pairs differ, and every score lies strictly within (0, 1).
TEST(SimScoring, ScoresAreDeterministic) {
  const Prompt q{"query", {1, 2}}, a{"doc a", {3}}, b{"doc b", {4}};
  EXPECT_EQ(pairScore(q, a), pairScore(q, a));
  EXPECT_NE(pairScore(q, a), pairScore(q, b));
  for (const Prompt* d : {&a, &b}) {
    EXPECT_GT(pairScore(q, *d), 0.0);
    EXPECT_LT(pairScore(q, *d), 1.0);
  }
}

// Ensures score pairs one text_1 with each text_2, or two lists one to one, and answers in the pairs' order.
TEST(SimScoring, ScorePairsAndShape) {
  auto one = parseScoreRequest(oneModel(), R"({"model":"ranker","text_1":"q","text_2":["a","b","c"]})");
  ASSERT_TRUE(one.ok()) << one.error;
  EXPECT_EQ(one.request.queries.size(), 3u);
  auto lists = parseScoreRequest(oneModel(), R"({"text_1":["q1","q2"],"text_2":["a","b"]})");
  ASSERT_TRUE(lists.ok()) << lists.error;
  EXPECT_EQ(lists.request.queries[1].text, "q2");
  json answer = scoreResponse("score-1", 7, one.request, {0.5, 0.25, 0.75});
  EXPECT_EQ(answer["object"], "list");
  EXPECT_EQ(answer["created"], 7);
  ASSERT_EQ(answer["data"].size(), 3u);
  EXPECT_EQ(answer["data"][2]["index"], 2);
  EXPECT_EQ(answer["data"][2]["object"], "score");
  EXPECT_EQ(answer["data"][2]["score"], 0.75);
  EXPECT_EQ(answer["usage"]["prompt_tokens"], one.request.tokens());
}

// Ensures bad requests get vLLM's statuses: 404 for a model not served, 400 for malformed or missing inputs.
TEST(SimScoring, BadRequests) {
  const SimConfig config = oneModel();
  EXPECT_EQ(parseRerankRequest(config, R"({"model":"other","query":"q","documents":["a"]})").status, 404);
  EXPECT_EQ(parseRerankRequest(config, "{not json").status, 400);
  EXPECT_EQ(parseRerankRequest(config, R"({"query":"q"})").status, 400);
  EXPECT_EQ(parseRerankRequest(config, R"({"query":"q","documents":"a"})").status, 400);
  EXPECT_EQ(parseRerankRequest(config, R"({"query":"q","documents":["a"],"top_n":-1})").status, 400);
  EXPECT_EQ(parseScoreRequest(config, R"({"text_1":["a","b"],"text_2":["c","d","e"]})").status, 400);
  EXPECT_EQ(parseScoreRequest(config, R"({"text_1":"a","text_2":[]})").status, 400);
  EXPECT_EQ(parseScoreRequest(config, R"({"text_1":5,"text_2":"b"})").status, 400);
}

}  // namespace
}  // namespace prefixgate::sim
