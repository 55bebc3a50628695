// The engine dialects' HTTP surfaces as pure functions (dialect.h): the metrics pages, tokenizer bodies, error
// shapes, response bodies, and the identity between llama-server's /apply-template + /tokenize and the tokens a
// chat request counts.
#include "engine_sim/dialect.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine_sim/llamacpp_json.h"
#include "engine_sim/prompt.h"
#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

SimConfig configFor(const char* dialect) {
  SimConfig config;
  config.engine_dialect = dialect;
  config.models = {"sim-model"};
  return config;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Each sample line of a Prometheus text page: "name{labels}" -> value text.
std::map<std::string, std::string> samples(const std::string& page) {
  std::map<std::string, std::string> out;
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    size_t space = line.rfind(' ');
    out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

MetricsSnapshot busySnapshot() {
  MetricsSnapshot s;
  s.num_requests_running = 3;
  s.num_requests_waiting = 2;
  s.kv_cache_usage = 0.25;
  s.block_size = 16;
  s.num_gpu_blocks = 25000;
  s.used_blocks = 6250;
  s.counters.prompt_tokens = 8128902;
  s.counters.generation_tokens = 70;
  s.counters.prefix_cache_queries = 200;
  s.counters.prefix_cache_hits = 50;
  s.activity.steps = 4;
  s.activity.busy_slot_steps = 10;
  s.activity.prefill_tokens = 1234567;
  s.activity.prefill_ms = 2500;
  s.activity.predicted_tokens = 9;
  s.activity.predicted_ms = 40;
  s.activity.max_sequence_tokens = 300;
  s.window.prefill_tokens = 100;
  s.window.prefill_ms = 50;
  s.window.predicted_steps = 8;
  s.window.predicted_ms = 40;
  s.window.generated_tokens = 10;
  s.window.busy_ms = 500;
  return s;
}

const json kChatBody = json::parse(R"({"model": "sim-model", "messages": [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "Summarise the report, please."},
    {"role": "assistant", "content": " abc def"},
    {"role": "user", "content": [{"type": "text", "text": "And again"}]}]})");

// Ensures special markers are one token each and the text between them restarts its 4-byte pieces.
TEST(SpecialTokens, MarkersAndPieces) {
  EXPECT_EQ(specialMarkerLength("<|user|>hi"), 8u);
  EXPECT_EQ(specialMarkerLength("<|bos|>"), 7u);
  EXPECT_EQ(specialMarkerLength("<||>"), 0u);
  EXPECT_EQ(specialMarkerLength("<|a b|>"), 0u);
  EXPECT_EQ(specialMarkerLength("<|user"), 0u);
  EXPECT_EQ(specialMarkerLength("user|>"), 0u);
  auto pieces = tokenizePieces("ab<|user|>hello<|x", true, true);
  ASSERT_EQ(pieces.size(), 5u);
  EXPECT_EQ(pieces[0].piece, "<|bos|>");
  EXPECT_EQ(pieces[0].id, specialTokenId(kBosMarker));
  EXPECT_EQ(pieces[1].piece, "ab");
  EXPECT_EQ(pieces[2].id, specialTokenId("<|user|>"));
  EXPECT_EQ(pieces[3].piece, "hell");
  EXPECT_EQ(pieces[4].piece, "o<|x");  // not a marker: plain text
}

// Ensures parse_special off cuts the whole text into plain pieces, and no BOS without add_special.
TEST(SpecialTokens, PlainWithoutParseSpecial) {
  EXPECT_EQ(tokenizeSpecial("<|user|>hi", false, false), tokenize("<|user|>hi"));
  EXPECT_EQ(tokenizeSpecial("plain text", false, true), tokenize("plain text"));
}

// Ensures a llamacpp chat prompt is the chat template's text tokenized with a BOS and special markers: the vLLM
// tokens after one BOS token.
TEST(DialectPrompt, LlamacppChatIsBosPlusTemplateTokens) {
  PromptResult vllm = chatPrompt(kChatBody, true, EngineDialect::kVllm);
  PromptResult llama = chatPrompt(kChatBody, true, EngineDialect::kLlamacpp);
  ASSERT_TRUE(vllm.ok() && llama.ok());
  EXPECT_EQ(vllm.prompt.tokens, chatPrompt(kChatBody, true).prompt.tokens);  // vllm unchanged
  EXPECT_EQ(llama.prompt.text, vllm.prompt.text);
  std::vector<uint32_t> expected{specialTokenId(kBosMarker)};
  expected.insert(expected.end(), vllm.prompt.tokens.begin(), vllm.prompt.tokens.end());
  EXPECT_EQ(llama.prompt.tokens, expected);
  EXPECT_EQ(chatPrompt(kChatBody, true, EngineDialect::kSglang).prompt.tokens, vllm.prompt.tokens);
}

// Ensures /apply-template's prompt, tokenized by /tokenize with add_special, is exactly what a chat request
// counts (usage.prompt_tokens and the cache), with tools and add_generation_prompt too.
TEST(DialectPrompt, ApplyTemplateThenTokenizeEqualsChatTokens) {
  SimConfig config = configFor("llamacpp");
  auto dialect = makeDialect(config);
  json body = kChatBody;
  body["tools"] = json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  for (bool generation_prompt : {true, false}) {
    body["add_generation_prompt"] = generation_prompt;
    SimpleResponse templated = dialect->tokenizer("/apply-template", body.dump());
    ASSERT_EQ(templated.status, 200) << templated.body;
    std::string text = json::parse(templated.body).at("prompt");
    EXPECT_EQ(text.ends_with("<|assistant|>"), generation_prompt);
    SimpleResponse tokenized =
        dialect->tokenizer("/tokenize", json{{"content", text}, {"add_special", true}}.dump());
    ASSERT_EQ(tokenized.status, 200);
    auto parsed = parseCompletionRequest(config, Endpoint::kChat, body.dump());
    ASSERT_TRUE(parsed.ok()) << parsed.error;
    EXPECT_EQ(json::parse(tokenized.body).at("tokens").get<std::vector<uint32_t>>(), parsed.request.prompt.tokens);
  }
}

// Ensures a completion's string prompt counts what /tokenize {"content", "add_special": true} returns.
TEST(DialectPrompt, LlamacppCompletionEqualsTokenize) {
  SimConfig config = configFor("llamacpp");
  auto dialect = makeDialect(config);
  std::string prompt = "Once upon a <|user|> time, in a land far away";
  auto parsed = parseCompletionRequest(config, Endpoint::kCompletion, json{{"prompt", prompt}}.dump());
  ASSERT_TRUE(parsed.ok());
  SimpleResponse tokenized = dialect->tokenizer("/tokenize", json{{"content", prompt}, {"add_special", true}}.dump());
  EXPECT_EQ(json::parse(tokenized.body).at("tokens").get<std::vector<uint32_t>>(), parsed.request.prompt.tokens);
  // Token-id prompts are used as they are (no BOS added).
  auto ids = parseCompletionRequest(config, Endpoint::kCompletion, R"({"prompt": [5, 6, 7]})");
  EXPECT_EQ(ids.request.prompt.tokens, (std::vector<uint32_t>{5, 6, 7}));
}

// Ensures llama-server's /tokenize body: {"tokens": [ids]}, no BOS by default, pieces on request (bytes when a
// piece is not valid UTF-8), nothing for a body without content, and its mixed content lists.
TEST(LlamacppDialect, TokenizeBodies) {
  auto dialect = makeDialect(configFor("llamacpp"));
  json plain = json::parse(dialect->tokenizer("/tokenize", R"({"content": "hello"})").body);
  EXPECT_EQ(plain, json({{"tokens", tokenize("hello")}}));
  json bos = json::parse(dialect->tokenizer("/tokenize", R"({"content": "hi", "add_special": true})").body);
  EXPECT_EQ(bos["tokens"][0], specialTokenId(kBosMarker));
  json pieces = json::parse(dialect->tokenizer("/tokenize", R"({"content": "abc\u00e9d", "with_pieces": true})").body);
  ASSERT_EQ(pieces["tokens"].size(), 2u);
  EXPECT_EQ(pieces["tokens"][0]["piece"], json::array({97, 98, 99, 0xC3}));  // cut inside "é"
  EXPECT_EQ(pieces["tokens"][1]["piece"], json::array({0xA9, 100}));
  EXPECT_EQ(pieces["tokens"][0]["id"], tokenId("abc\xC3"));
  EXPECT_EQ(json::parse(dialect->tokenizer("/tokenize", "{}").body), json::parse(R"({"tokens": []})"));
  json mixed =
      json::parse(dialect->tokenizer("/tokenize", R"({"content": ["ab", 7, "cd"], "add_special": true})").body);
  EXPECT_EQ(mixed["tokens"], json({specialTokenId(kBosMarker), tokenId("ab"), 7, tokenId("cd")}));
  SimpleResponse broken = dialect->tokenizer("/tokenize", "{not json");
  EXPECT_EQ(broken.status, 500);
  EXPECT_EQ(json::parse(broken.body)["error"]["type"], "server_error");
}

// Ensures /apply-template refuses a body without messages in llama-server's error shape.
TEST(LlamacppDialect, ErrorsInItsShape) {
  auto dialect = makeDialect(configFor("llamacpp"));
  SimpleResponse missing = dialect->tokenizer("/apply-template", R"({"prompt": "x"})");
  EXPECT_EQ(missing.status, 400);
  EXPECT_EQ(missing.body,
            R"({"error":{"code":400,"message":"'messages' is required","type":"invalid_request_error"}})");
  EXPECT_EQ(json::parse(dialect->error(404, "nope").body)["error"]["type"], "not_found_error");
  EXPECT_EQ(json::parse(dialect->error(503, "x").body)["error"]["type"], "unavailable_error");
  EXPECT_EQ(dialect->health(200).body, R"({"status":"ok"})");
  EXPECT_EQ(dialect->health(503).status, 503);
}

// Ensures llama-server's /metrics page: HELP, TYPE and one unlabelled sample per series, counters then gauges,
// values printed as a C++ stream prints them, and no vllm: series.
TEST(LlamacppDialect, MetricsPage) {
  auto dialect = makeDialect(configFor("llamacpp"));
  MetricsSnapshot snapshot = busySnapshot();
  EngineHistograms histograms;
  SimpleResponse page = dialect->metrics(EngineView{snapshot, histograms, 1700000000});
  EXPECT_EQ(page.content_type, "text/plain; version=0.0.4");
  ASSERT_EQ(page.headers.size(), 1u);
  EXPECT_EQ(page.headers[0], (std::pair<std::string, std::string>{"Process-Start-Time-Unix", "1700000000"}));
  EXPECT_TRUE(contains(
      page.body,
      "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens\n"
      "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1.23457e+06\n"));
  auto values = samples(page.body);
  EXPECT_EQ(values["llamacpp:prompt_tokens_cached_total"], "50");
  EXPECT_EQ(values["llamacpp:prompt_seconds_total"], "2.5");
  EXPECT_EQ(values["llamacpp:tokens_predicted_total"], "9");
  EXPECT_EQ(values["llamacpp:tokens_predicted_seconds_total"], "0.04");
  EXPECT_EQ(values["llamacpp:n_decode_total"], "4");
  EXPECT_EQ(values["llamacpp:n_tokens_max"], "300");
  EXPECT_EQ(values["llamacpp:prompt_tokens_seconds"], "2000");   // 100 tokens in 50 ms
  EXPECT_EQ(values["llamacpp:predicted_tokens_seconds"], "200");  // 8 decode steps in 40 ms
  EXPECT_EQ(values["llamacpp:requests_processing"], "3");
  EXPECT_EQ(values["llamacpp:requests_deferred"], "2");
  EXPECT_EQ(values["llamacpp:n_busy_slots_per_decode"], "2.5");
  EXPECT_EQ(values.size(), 15u);
  EXPECT_TRUE(contains(page.body, "# TYPE llamacpp:requests_processing gauge\n"));
  EXPECT_FALSE(contains(page.body, "vllm:"));
  EXPECT_FALSE(contains(page.body, "{"));
}

// Ensures llama-server's timings object and its rates (the first output token is free).
TEST(LlamacppDialect, Timings) {
  json timings = json::parse(llamacpp::timingsJson(Timings{32, 8, 20.0, 5, 40.0}).dump());
  EXPECT_EQ(timings, json::parse(R"({"cache_n": 32, "prompt_n": 8, "prompt_ms": 20.0, "prompt_per_token_ms": 2.5,
      "prompt_per_second": 400.0, "predicted_n": 5, "predicted_ms": 40.0, "predicted_per_token_ms": 10.0,
      "predicted_per_second": 100.0})"));
  EXPECT_EQ(llamacpp::timingsJson(Timings{})["predicted_per_second"], 0.0);
}

// Ensures a stream's end as to_json_oaicompat_chat_stream sends it: timings on the last chunk (the usage chunk
// with include_usage, else the finish chunk), usage only with include_usage; a completion stream's final chunk
// has usage and timings.
TEST(LlamacppDialect, StreamEnds) {
  auto dialect = makeDialect(configFor("llamacpp"));
  CompletionMeta chat{Endpoint::kChat, "chatcmpl-1", 1700000000, "sim-model"};
  Outcome outcome{Usage{40, 3, 32}, Timings{32, 8, 20.0, 3, 10.0}};
  auto events = [](const std::string& stream) {
    std::vector<json> chunks;
    std::istringstream lines(stream);
    for (std::string line; std::getline(lines, line);)
      if (line.starts_with("data: {")) chunks.push_back(json::parse(line.substr(6)));
    return chunks;
  };
  std::string with_usage = dialect->streamEnd(chat, "length", true, outcome);
  EXPECT_TRUE(with_usage.ends_with("data: [DONE]\n\n"));
  auto chunks = events(with_usage);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(chunks[0].contains("timings"));
  EXPECT_EQ(chunks[1]["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(chunks[1]["timings"]["cache_n"], 32);
  chunks = events(dialect->streamEnd(chat, "stop", false, outcome));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_FALSE(chunks[0].contains("usage"));
  EXPECT_EQ(chunks[0]["timings"]["prompt_n"], 8);
  CompletionMeta text{Endpoint::kCompletion, "cmpl-1", 1700000000, "sim-model"};
  chunks = events(dialect->streamEnd(text, "length", false, outcome));
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(chunks[0]["timings"]["predicted_n"], 3);
  // The first chat token comes after llama-server's {"role": "assistant", "content": null} chunk.
  chunks = events(dialect->tokenEvents(chat, " abc", true));
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0]["choices"][0]["delta"], json::parse(R"({"role": "assistant", "content": null})"));
  EXPECT_EQ(chunks[1]["choices"][0]["delta"], json::parse(R"({"content": " abc"})"));
}

// Ensures whole chat and completion bodies carry usage with cached tokens and timings, in llama-server's field
// order.
TEST(LlamacppDialect, CompletionBodies) {
  auto dialect = makeDialect(configFor("llamacpp"));
  Outcome outcome{Usage{40, 2, 32}, Timings{32, 8, 20.0, 2, 5.0}};
  std::string chat = dialect->completionBody({Endpoint::kChat, "chatcmpl-1", 7, "sim-model"}, " ab cd", "length",
                                             outcome);
  EXPECT_TRUE(chat.starts_with(R"({"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant",)"
                               R"("content":" ab cd"}}],"created":7,"model":"sim-model","system_fingerprint":"sim",)"
                               R"("object":"chat.completion","usage":{"completion_tokens":2,"prompt_tokens":40,)"
                               R"("total_tokens":42,"prompt_tokens_details":{"cached_tokens":32}},"id":"chatcmpl-1",)"
                               R"("timings":{"cache_n":32,"prompt_n":8,)"))
      << chat;
  json text = json::parse(dialect->completionBody({Endpoint::kCompletion, "cmpl-1", 7, "sim-model"}, " ab", "stop",
                                                  outcome));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], " ab");
  EXPECT_EQ(text["timings"]["predicted_n"], 2);
}

// Ensures /props and /slots: --max-num-seqs slots, each with the KV capacity's share as its context.
TEST(LlamacppDialect, PropsAndSlots) {
  SimConfig config = configFor("llamacpp");
  config.max_num_seqs = 4;
  config.kv_capacity_tokens = 40000;
  auto dialect = makeDialect(config);
  MetricsSnapshot snapshot;
  snapshot.num_requests_running = 1;
  EngineHistograms histograms;
  EngineView view{snapshot, histograms, 0};
  json props = json::parse(dialect->info("/props", view)->body);
  EXPECT_EQ(props["total_slots"], 4);
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 10000);
  EXPECT_EQ(props["default_generation_settings"]["params"], json::object());
  EXPECT_EQ(props["model_alias"], "sim-model");
  EXPECT_EQ(props["build_info"], "sim");
  json slots = json::parse(dialect->info("/slots", view)->body);
  ASSERT_EQ(slots.size(), 4u);
  EXPECT_EQ(slots[0], json::parse(R"({"id": 0, "n_ctx": 10000, "speculative": false, "is_processing": true})"));
  EXPECT_EQ(slots[3]["is_processing"], false);
  EXPECT_FALSE(dialect->info("/other", view).has_value());
  EXPECT_FALSE(makeDialect(configFor("vllm"))->info("/props", view).has_value());
}

// Ensures /slots with the slots KV cache model: each slot's own is_processing, and once it served a request
// llama-server's task fields (n_prompt_tokens: the tokens it holds).
TEST(LlamacppDialect, SlotsOfTheSlotsModel) {
  SimConfig config = configFor("llamacpp");
  config.max_num_seqs = 2;
  config.kv_capacity_tokens = 8192;
  auto dialect = makeDialect(config);
  MetricsSnapshot snapshot;
  snapshot.num_requests_running = 1;
  snapshot.slots = {SlotView{}, SlotView{true, true, 7, 120, 100, 20}};
  EngineHistograms histograms;
  EngineView view{snapshot, histograms, 0};
  json slots = json::parse(dialect->info("/slots", view)->body);
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0], json::parse(R"({"id": 0, "n_ctx": 4096, "speculative": false, "is_processing": false})"));
  EXPECT_EQ(slots[1], json::parse(R"({"id": 1, "n_ctx": 4096, "speculative": false, "is_processing": true,
      "id_task": 7, "n_prompt_tokens": 120, "n_prompt_tokens_processed": 20, "n_prompt_tokens_cache": 100})"));
}

// Ensures SGLang's page: its gauges with the scheduler's labels, counters and histograms with model_name,
// prometheus_client's number format (Go-style exponents, ".0"), its bucket bounds, and no vllm: series.
TEST(SglangDialect, MetricsPage) {
  SimConfig config = configFor("sglang");
  auto dialect = makeDialect(config);
  MetricsSnapshot snapshot = busySnapshot();
  EngineHistograms histograms = engineHistograms(EngineDialect::kSglang);
  histograms.time_to_first_token.observe(0.15);
  SimpleResponse page = dialect->metrics(EngineView{snapshot, histograms, 0});
  const std::string gauge_labels = R"({engine_type="unified",model_name="sim-model",pp_rank="0",tp_rank="0"})";
  auto values = samples(page.body);
  EXPECT_EQ(values["sglang:num_running_reqs" + gauge_labels], "3.0");
  EXPECT_EQ(values["sglang:num_queue_reqs" + gauge_labels], "2.0");
  EXPECT_EQ(values["sglang:token_usage" + gauge_labels], "0.25");
  EXPECT_EQ(values["sglang:max_total_num_tokens" + gauge_labels], "400000.0");
  EXPECT_EQ(values["sglang:num_used_tokens" + gauge_labels], "100000.0");
  EXPECT_EQ(values["sglang:cache_hit_rate" + gauge_labels], "0.25");
  EXPECT_EQ(values["sglang:gen_throughput" + gauge_labels], "20.0");  // 10 tokens in 0.5 s
  EXPECT_EQ(values[R"(sglang:prompt_tokens_total{model_name="sim-model"})"], "8.128902e+06");
  EXPECT_EQ(values[R"(sglang:generation_tokens_total{model_name="sim-model"})"], "70.0");
  EXPECT_EQ(values[R"(sglang:cached_tokens_total{model_name="sim-model"})"], "50.0");
  EXPECT_EQ(values[R"(sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="sim-model"})"], "0.0");
  EXPECT_EQ(values[R"(sglang:time_to_first_token_seconds_bucket{le="0.2",model_name="sim-model"})"], "1.0");
  EXPECT_EQ(values[R"(sglang:time_to_first_token_seconds_bucket{le="400.0",model_name="sim-model"})"], "1.0");
  EXPECT_EQ(values[R"(sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="sim-model"})"], "1.0");
  EXPECT_EQ(values[R"(sglang:time_to_first_token_seconds_count{model_name="sim-model"})"], "1.0");
  EXPECT_TRUE(contains(page.body, "# HELP sglang:token_usage The token usage.\n# TYPE sglang:token_usage gauge\n"));
  EXPECT_TRUE(contains(page.body, "# TYPE sglang:prompt_tokens_total counter\n"));
  EXPECT_TRUE(contains(page.body, "# TYPE sglang:time_to_first_token_seconds histogram\n"));
  EXPECT_FALSE(contains(page.body, "vllm:"));
}

// Ensures SGLang's /tokenize: a string gives tokens and a count, a list gives lists and counts, max_model_len;
// messages instead of prompt is a 400 in SGLang's flat error shape.
TEST(SglangDialect, TokenizeBodies) {
  SimConfig config = configFor("sglang");
  auto dialect = makeDialect(config);
  EXPECT_TRUE(dialect->isTokenizerPath("/tokenize"));
  EXPECT_TRUE(dialect->isTokenizerPath("/v1/tokenize"));
  SimpleResponse one = dialect->tokenizer("/tokenize", R"({"model": "sim-model", "prompt": "hello world"})");
  EXPECT_EQ(json::parse(one.body), json({{"tokens", tokenize("hello world")}, {"count", 3}, {"max_model_len", 32768}}));
  EXPECT_TRUE(one.body.starts_with(R"({"tokens":)"));  // pydantic's field order
  json many = json::parse(dialect->tokenizer("/v1/tokenize", R"({"prompt": ["hello", "abc"]})").body);
  EXPECT_EQ(many["tokens"], json({tokenize("hello"), tokenize("abc")}));
  EXPECT_EQ(many["count"], json({2, 1}));
  SimpleResponse chat = dialect->tokenizer("/tokenize", R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(chat.status, 400);
  json error = json::parse(chat.body);
  EXPECT_EQ(error["object"], "error");
  EXPECT_EQ(error["type"], "Bad Request");
  EXPECT_EQ(error["code"], 400);
  EXPECT_TRUE(error["param"].is_null());
  EXPECT_TRUE(contains(error["message"], "prompt"));
  EXPECT_TRUE(chat.body.starts_with(R"({"object":"error","message":)"));
  EXPECT_EQ(dialect->tokenizer("/tokenize", R"({"prompt": 5})").status, 400);
  EXPECT_EQ(json::parse(dialect->error(404, "x").body)["object"], "error");
}

// Ensures the vllm dialect is today's surface: the same bytes as the functions it wraps.
TEST(VllmDialect, SameBytesAsBefore) {
  SimConfig config = configFor("vllm");
  auto dialect = makeDialect(config);
  EXPECT_EQ(dialect->error(400, "bad").body, errorResponse(400, "bad").body);
  MetricsSnapshot snapshot = busySnapshot();
  EngineHistograms histograms;
  EXPECT_EQ(dialect->metrics(EngineView{snapshot, histograms, 0}).body,
            renderMetrics(snapshot, histograms, "sim-model"));
  EXPECT_TRUE(dialect->metrics(EngineView{snapshot, histograms, 0}).headers.empty());
  EXPECT_EQ(dialect->tokenizer("/tokenize", R"({"prompt": "abc"})").body,
            handleTokenize(config, R"({"prompt": "abc"})").body);
  EXPECT_FALSE(dialect->isTokenizerPath("/v1/tokenize"));
  CompletionMeta meta{Endpoint::kChat, "chatcmpl-1", 7, "sim-model"};
  Outcome outcome{Usage{10, 2, 0}, Timings{}};
  EXPECT_EQ(dialect->streamEnd(meta, "stop", true, outcome),
            sseEvent(finishChunk(meta, "stop")) + sseEvent(usageChunk(meta, outcome.usage)) + std::string(kSseDone));
  EXPECT_EQ(dialect->completionBody(meta, " ab", "stop", outcome),
            completionResponse(meta, " ab", "stop", outcome.usage).dump());
  EXPECT_EQ(dialect->tokenEvents(meta, " ab", true), sseEvent(tokenChunk(meta, " ab", true)));
  EXPECT_EQ(dialect->health(503).body, "");
}

// Ensures --engine-dialect is validated.
TEST(DialectConfig, RejectsUnknownDialect) {
  SimConfig config = configFor("tgi");
  EXPECT_NE(validateConfig(config).find("--engine-dialect"), std::string::npos);
  EXPECT_EQ(validateConfig(configFor("llamacpp")), "");
  EXPECT_EQ(parseEngineDialect("sglang"), EngineDialect::kSglang);
  EXPECT_EQ(engineDialectName(EngineDialect::kLlamacpp), "llamacpp");
}

// Ensures --kv-cache-model and its slots settings are validated: unknown model, similarity range, a host cache or
// KV events where the model cannot have them, slots too small to hold a token.
TEST(DialectConfig, ValidatesKvCacheModel) {
  SimConfig config = configFor("llamacpp");
  EXPECT_EQ(parseKvCacheModel("slots"), KvCacheModel::kSlots);
  EXPECT_EQ(kvCacheModelName(KvCacheModel::kPaged), "paged");
  config.kv_cache_model = "radix";
  EXPECT_TRUE(contains(validateConfig(config), "--kv-cache-model"));
  config.kv_cache_model = "paged";
  config.host_cache_tokens = 1000;
  EXPECT_TRUE(contains(validateConfig(config), "--host-cache-tokens"));
  config.kv_cache_model = "slots";
  EXPECT_EQ(validateConfig(config), "");
  config.slot_prompt_similarity = 1.5;
  EXPECT_TRUE(contains(validateConfig(config), "--slot-prompt-similarity"));
  config.slot_prompt_similarity = 0.1;
  config.kv_events = "tcp://*:0";
  EXPECT_TRUE(contains(validateConfig(config), "--kv-events"));
  config.kv_events.clear();
  config.max_num_seqs = 32;
  config.kv_capacity_tokens = 32;
  EXPECT_TRUE(contains(validateConfig(config), "leaves under 2 tokens a slot"));
}

}  // namespace
}  // namespace prefixgate::sim
