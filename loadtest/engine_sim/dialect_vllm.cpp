// vLLM's OpenAI server, the simulator's default surface: vllm:* metrics, POST /tokenize (completion and chat
// forms), {"error": {...}} errors; the response bodies are Dialect's defaults (openai_json.h).
#include "engine_sim/dialect.h"

namespace prefixgate::sim {
namespace {

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

class VllmDialect final : public Dialect {
 public:
  explicit VllmDialect(const SimConfig& config) : Dialect(config) {}

  SimpleResponse error(int status, std::string_view message) const override {
    return errorResponse(status, message);
  }

  SimpleResponse metrics(const EngineView& view) const override {
    return SimpleResponse{200, kMetricsContentType,
                          renderMetrics(view.snapshot, view.histograms, config_.servedModel())};
  }

  bool isTokenizerPath(std::string_view path) const override { return path == "/tokenize"; }

  SimpleResponse tokenizer(std::string_view, std::string_view body) const override {
    return handleTokenize(config_, body);
  }
};

}  // namespace

std::unique_ptr<Dialect> makeVllmDialect(const SimConfig& config) { return std::make_unique<VllmDialect>(config); }

}  // namespace prefixgate::sim
