// SGLang's server (sgl-project/sglang, python/sglang/srt): the sglang:* series of metrics/collector.py as
// prometheus_client's multiprocess collector writes them, POST /tokenize and /v1/tokenize of
// entrypoints/openai/serving_tokenize.py, and its flat {"object": "error", ...} errors. Chat and completion
// bodies are vLLM's (the same OpenAI shapes, usage.prompt_tokens_details.cached_tokens as with
// --enable-cache-report, no timings).
#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine_sim/dialect.h"
#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
// The scheduler's labels (SchedulerMetricsCollector) for one engine without disaggregation, tensor or pipeline
// parallelism; the tokenizer manager's series carry model_name alone.
constexpr const char* kEngineType = "unified";
constexpr const char* kRank = "0";

// prometheus_client's floatToGoString: Python's repr, with Go's earlier switch to an exponent for large values.
std::string goFloat(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value)) return "NaN";
  std::string repr = fmt::format("{}", value);  // the shortest round trip, as Python's repr
  if (repr.find_first_of(".e") == std::string::npos) repr += ".0";
  size_t dot = repr.find('.');
  if (value > 0 && dot != std::string::npos && dot > 6 && repr.find('e') == std::string::npos) {
    std::string mantissa = repr.substr(0, 1) + "." + repr.substr(1, dot - 1) + repr.substr(dot + 1);
    while (!mantissa.empty() && (mantissa.back() == '0' || mantissa.back() == '.')) mantissa.pop_back();
    return fmt::format("{}e+0{}", mantissa, dot - 1);
  }
  return repr;
}

class Page {
 public:
  explicit Page(const std::string& model) : model_(fmt::format("model_name=\"{}\"", escapeLabel(model))) {
    scheduler_ = fmt::format("engine_type=\"{}\",{},pp_rank=\"{}\",tp_rank=\"{}\"", kEngineType, model_, kRank,
                             kRank);
  }
  void gauge(const char* name, const char* help, double value) {
    header(name, "gauge", help);
    fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name, scheduler_, goFloat(value));
  }
  void counter(const char* name, const char* help, double value) {
    header(name, "counter", help);
    fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name, model_, goFloat(value));
  }
  // Sorted labels ("le" before "model_name"); _sum first, as the multiprocess collector writes them.
  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    fmt::format_to(std::back_inserter(out_), "{}_sum{{{}}} {}\n", name, model_, goFloat(h.sum()));
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.upperBounds().size(); ++i) {
      cumulative += h.bucketCounts()[i];
      fmt::format_to(std::back_inserter(out_), "{}_bucket{{le=\"{}\",{}}} {}\n", name, goFloat(h.upperBounds()[i]),
                     model_, goFloat(static_cast<double>(cumulative)));
    }
    fmt::format_to(std::back_inserter(out_), "{}_bucket{{le=\"+Inf\",{}}} {}\n", name, model_,
                   goFloat(static_cast<double>(h.count())));
    fmt::format_to(std::back_inserter(out_), "{}_count{{{}}} {}\n", name, model_,
                   goFloat(static_cast<double>(h.count())));
  }
  std::string take() { return std::move(out_); }

 private:
  void header(const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  std::string model_;
  std::string scheduler_;
  std::string out_;
};

class SglangDialect final : public Dialect {
 public:
  explicit SglangDialect(const SimConfig& config) : Dialect(config) {}

  SimpleResponse error(int status, std::string_view message) const override {
    return flatError(status, message, errorType(status));
  }

  SimpleResponse metrics(const EngineView& view) const override {
    const MetricsSnapshot& s = view.snapshot;
    const EngineCounters& c = s.counters;
    Page page(config_.servedModel());
    double capacity_tokens = static_cast<double>(s.num_gpu_blocks) * s.block_size;
    double busy_s = s.window.busy_ms / 1000;
    page.gauge("sglang:num_running_reqs", "The number of running requests.",
               static_cast<double>(s.num_requests_running));
    page.gauge("sglang:num_used_tokens", "The number of used tokens.",
               static_cast<double>(s.used_blocks) * s.block_size);
    page.gauge("sglang:token_usage", "The token usage.", s.kv_cache_usage);
    page.gauge("sglang:gen_throughput", "The generation throughput (token/s).",
               busy_s > 0 ? static_cast<double>(s.window.generated_tokens) / busy_s : 0);
    page.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.",
               static_cast<double>(s.num_requests_waiting));
    page.gauge("sglang:cache_hit_rate", "The prefix cache hit rate.",
               c.prefix_cache_queries > 0
                   ? static_cast<double>(c.prefix_cache_hits) / static_cast<double>(c.prefix_cache_queries)
                   : 0);
    page.gauge("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.",
               capacity_tokens);
    page.counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                 static_cast<double>(c.prompt_tokens));
    page.counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                 static_cast<double>(c.generation_tokens));
    page.counter("sglang:cached_tokens_total", "Number of cached prompt tokens.",
                 static_cast<double>(c.prefix_cache_hits));
    page.counter("sglang:num_requests_total", "Number of requests processed.",
                 static_cast<double>(view.histograms.e2e_request_latency.count()));
    page.histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                   view.histograms.time_to_first_token);
    page.histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                   view.histograms.inter_token_latency);
    page.histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                   view.histograms.e2e_request_latency);
    return SimpleResponse{200, kMetricsContentType, page.take()};
  }

  bool isTokenizerPath(std::string_view path) const override {
    return path == "/tokenize" || path == "/v1/tokenize";
  }

  // TokenizeRequest {"model", "prompt": str | [str], "add_special_tokens": bool = true}; anything else fails
  // FastAPI's validation (400 in SGLang's shape). The simulated tokenizer has no BOS, so add_special_tokens
  // changes nothing (as in the vllm dialect); max_model_len is --max-model-len.
  SimpleResponse tokenizer(std::string_view, std::string_view body) const override {
    json doc = json::parse(body.begin(), body.end(), nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) return validationError("0", "json_invalid", "JSON decode error");
    auto prompt = doc.find("prompt");
    if (prompt == doc.end()) return validationError("'prompt'", "missing", "Field required");
    if (auto add = doc.find("add_special_tokens"); add != doc.end() && !add->is_boolean())
      return validationError("'add_special_tokens'", "bool_type", "Input should be a valid boolean");
    ordered_json answer;
    if (prompt->is_string()) {
      std::vector<uint32_t> tokens = tokenize(prompt->get_ref<const std::string&>());
      answer["tokens"] = tokens;
      answer["count"] = tokens.size();
    } else if (prompt->is_array() && allStrings(*prompt)) {
      ordered_json lists = ordered_json::array();
      ordered_json counts = ordered_json::array();
      for (const auto& text : *prompt) {
        std::vector<uint32_t> tokens = tokenize(text.get_ref<const std::string&>());
        counts.push_back(tokens.size());
        lists.push_back(std::move(tokens));
      }
      answer["tokens"] = std::move(lists);
      answer["count"] = std::move(counts);
    } else {
      return validationError("'prompt'", "string_type", "Input should be a valid string or a list of strings");
    }
    answer["max_model_len"] = config_.max_model_len;
    return SimpleResponse{200, "application/json", answer.dump()};
  }

  SimpleResponse models(int64_t created) const override {
    json list = modelsList(config_.models, created, config_.max_model_len);
    for (auto& card : list["data"]) card["owned_by"] = "sglang";
    return SimpleResponse{200, "application/json", list.dump()};
  }

 private:
  static bool allStrings(const json& list) {
    for (const auto& item : list)
      if (!item.is_string()) return false;
    return true;
  }

  // ErrorResponse: {"object": "error", "message", "type", "param": null, "code"}.
  static SimpleResponse flatError(int status, std::string_view message, std::string_view type) {
    ordered_json body{{"object", "error"},
                      {"message", std::string(message)},
                      {"type", std::string(type)},
                      {"param", nullptr},
                      {"code", status}};
    return SimpleResponse{status, "application/json", body.dump()};
  }

  // http_server.py's RequestValidationError handler: 400, type "Bad Request", the error list as the message
  // (`where`: the location after 'body', as Python prints it).
  static SimpleResponse validationError(std::string_view where, std::string_view kind, std::string_view msg) {
    std::string message = fmt::format("[{{'type': '{}', 'loc': ('body', {}), 'msg': '{}'}}]", kind, where, msg);
    return flatError(400, message, "Bad Request");
  }
};

}  // namespace

std::unique_ptr<Dialect> makeSglangDialect(const SimConfig& config) {
  return std::make_unique<SglangDialect>(config);
}

}  // namespace prefixgate::sim
