#pragma once
// One engine's HTTP surface (--engine-dialect) behind one narrow interface. The server does the I/O and drives
// the engine; a Dialect turns requests and engine state into that engine's bytes (pure: no sockets, no clocks).
// One file per dialect: dialect_vllm.cpp (vLLM, the default), dialect_sglang.cpp (SGLang), dialect_llamacpp.cpp
// (llama.cpp's llama-server). What each emits, with its upstream source: docs/simulator.md, "Engine dialects".
// The endpoints every dialect keeps (/v1/*, /sim/*, /reset_prefix_cache) and the prompt's tokens
// (prompt.h, by EngineDialect) are outside this interface.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "engine_sim/metrics_text.h"
#include "engine_sim/openai_json.h"
#include "engine_sim/request_handlers.h"
#include "engine_sim/sim_config.h"

namespace prefixgate::sim {

// The engine state an endpoint answered at once may read.
struct EngineView {
  const MetricsSnapshot& snapshot;
  const EngineHistograms& histograms;
  int64_t started_at = 0;  // unix seconds
};

// What a response reports about its request once it finished.
struct Outcome {
  Usage usage;
  Timings timings;
  // A request with kv_transfer_params (vllm dialect): the "kv_transfer_params" of its non-streamed response (null
  // or a prefill leg's hand-off, kv_transfer.h); nullopt leaves the field out.
  std::optional<nlohmann::json> kv_transfer_params = std::nullopt;
};

class Dialect {
 public:
  virtual ~Dialect() = default;

  // An error answer in this engine's shape.
  virtual SimpleResponse error(int status, std::string_view message) const = 0;
  // GET /metrics. The server starts a new activity window (Engine::startActivityWindow) after each scrape.
  virtual SimpleResponse metrics(const EngineView& view) const = 0;
  // This engine's tokenizer endpoints (POST /tokenize, ...): recorded in /sim/requests and subject to the
  // injected tokenize faults; tokenizer() answers them.
  virtual bool isTokenizerPath(std::string_view path) const = 0;
  virtual SimpleResponse tokenizer(std::string_view path, std::string_view body) const = 0;

  // GET /health with the injected status (default: vLLM's empty body).
  virtual SimpleResponse health(int status) const;
  // This engine's other GET endpoints (llama-server's /props and /slots); nullopt for any other path.
  virtual std::optional<SimpleResponse> info(std::string_view path, const EngineView& view) const;
  // GET /v1/models (default: vLLM's list).
  virtual SimpleResponse models(int64_t created) const;
  // The SSE events of one streamed token (`first`: the response's first). Default: vLLM's chunks.
  virtual std::string tokenEvents(const CompletionMeta& meta, const std::string& text, bool first) const;
  // What follows a stream's last token, through "data: [DONE]". Default: vLLM's finish chunk, its usage chunk
  // when include_usage.
  virtual std::string streamEnd(const CompletionMeta& meta, std::string_view finish_reason, bool include_usage,
                                const Outcome& outcome) const;
  // A whole (non-streamed) chat.completion or text_completion body. Default: vLLM's (with the outcome's
  // kv_transfer_params when set).
  virtual std::string completionBody(const CompletionMeta& meta, const std::string& text,
                                     std::string_view finish_reason, const Outcome& outcome) const;

 protected:
  explicit Dialect(SimConfig config) : config_(std::move(config)) {}
  SimConfig config_;
};

// The dialect of config.engine_dialect (validated).
std::unique_ptr<Dialect> makeDialect(const SimConfig& config);

// One per file; makeDialect picks.
std::unique_ptr<Dialect> makeVllmDialect(const SimConfig& config);
std::unique_ptr<Dialect> makeSglangDialect(const SimConfig& config);
std::unique_ptr<Dialect> makeLlamacppDialect(const SimConfig& config);

}  // namespace prefixgate::sim
