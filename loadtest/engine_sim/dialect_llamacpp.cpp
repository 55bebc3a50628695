// llama.cpp's llama-server (tools/server): the llamacpp:* metrics page without labels, POST /tokenize
// ({"content", "add_special", "parse_special", "with_pieces"} -> {"tokens"}), POST /apply-template, GET /props and
// /slots, {"error": {"code", "message", "type"}} errors, and its chat/completion bodies with usage and timings
// (llamacpp_json.h). Prompts are tokenized as llama-server does (prompt.h): the chat template's text with a BOS
// token and special markers parsed, so /apply-template then /tokenize {"add_special": true} gives the very tokens
// a chat request counts and caches.
#include <nlohmann/json.hpp>

#include "engine_sim/dialect.h"
#include "engine_sim/llamacpp_json.h"
#include "engine_sim/prompt.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;
using llamacpp::OrderedJson;

constexpr const char* kMetricsContentType = "text/plain; version=0.0.4";
// What the chat template looks like, for /props (the simulator's stand-in, prompt.h).
constexpr const char* kChatTemplate =
    "{% for message in messages %}<|{{ message.role }}|>{{ message.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}";

// json_value(body, key, default): the field when it has the default's type, else the default.
bool boolField(const json& body, const char* key, bool fallback) {
  auto it = body.is_object() ? body.find(key) : body.end();
  return it != body.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

SimpleResponse jsonResponse(int status, const OrderedJson& body) {
  return SimpleResponse{status, "application/json", body.dump(-1, ' ', false, OrderedJson::error_handler_t::replace)};
}

class LlamacppDialect final : public Dialect {
 public:
  explicit LlamacppDialect(const SimConfig& config) : Dialect(config) {}

  SimpleResponse error(int status, std::string_view message) const override {
    return jsonResponse(status, llamacpp::errorJson(status, message));
  }

  SimpleResponse health(int status) const override {
    if (status == 200) return jsonResponse(200, OrderedJson{{"status", "ok"}});
    return error(status, "Loading model");
  }

  SimpleResponse metrics(const EngineView& view) const override {
    SimpleResponse response{200, kMetricsContentType, llamacpp::metricsText(view.snapshot)};
    response.headers.emplace_back("Process-Start-Time-Unix", std::to_string(view.started_at));
    return response;
  }

  bool isTokenizerPath(std::string_view path) const override {
    return path == "/tokenize" || path == "/apply-template";
  }

  SimpleResponse tokenizer(std::string_view path, std::string_view body) const override {
    // json::parse throws in llama-server and its exception wrapper answers 500.
    json doc = json::parse(body.begin(), body.end(), nullptr, false);
    if (doc.is_discarded()) return error(500, "[json.exception.parse_error.101] parse error: syntax error");
    return path == "/tokenize" ? tokenize(doc) : applyTemplate(doc);
  }

  std::optional<SimpleResponse> info(std::string_view path, const EngineView& view) const override {
    if (path == "/props") return jsonResponse(200, props());
    if (path == "/slots") return jsonResponse(200, slots(view.snapshot));
    return std::nullopt;
  }

  SimpleResponse models(int64_t created) const override {
    json list = modelsList(config_.models, created, config_.max_model_len);
    for (auto& card : list["data"]) card["owned_by"] = "llamacpp";
    return SimpleResponse{200, "application/json", list.dump()};
  }

  std::string tokenEvents(const CompletionMeta& meta, const std::string& text, bool first) const override {
    return llamacpp::sseEvents(llamacpp::tokenChunks(meta, text, first));
  }

  std::string streamEnd(const CompletionMeta& meta, std::string_view finish_reason, bool include_usage,
                        const Outcome& outcome) const override {
    return llamacpp::sseEvents(
               llamacpp::finalChunks(meta, finish_reason, include_usage, outcome.usage, outcome.timings)) +
           std::string(kSseDone);
  }

  std::string completionBody(const CompletionMeta& meta, const std::string& text, std::string_view finish_reason,
                             const Outcome& outcome) const override {
    return llamacpp::completionBody(meta, text, finish_reason, outcome.usage, outcome.timings)
        .dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  }

 private:
  // Per-slot context: the KV capacity shared by --max-num-seqs slots, as llama-server splits its context.
  uint64_t slotContext() const { return config_.kv_capacity_tokens / config_.max_num_seqs; }

  // post_tokenize: "content" is a string, or a list of strings and token ids (tokenize_mixed: only the first
  // element may get the BOS); no "content" gives no tokens.
  SimpleResponse tokenize(const json& doc) const {
    bool add_special = boolField(doc, "add_special", false);
    bool parse_special = boolField(doc, "parse_special", true);
    bool with_pieces = boolField(doc, "with_pieces", false);
    std::vector<TokenPiece> pieces;
    auto content = doc.is_object() ? doc.find("content") : doc.end();
    if (content != doc.end()) {
      if (content->is_string()) {
        pieces = tokenizePieces(content->get_ref<const std::string&>(), add_special, parse_special);
      } else if (content->is_array()) {
        bool first = true;
        for (const auto& item : *content) {
          if (item.is_string()) {
            auto more = tokenizePieces(item.get_ref<const std::string&>(), add_special && first, parse_special);
            pieces.insert(pieces.end(), more.begin(), more.end());
          } else if (item.is_number_integer()) {
            pieces.push_back({static_cast<uint32_t>(item.get<int64_t>()), ""});
          } else {
            return error(500, "[json.exception.type_error.302] type must be number, but is " +
                                  std::string(item.type_name()));
          }
          first = false;
        }
      } else {
        return error(500, "[json.exception.type_error.302] type must be string, but is " +
                              std::string(content->type_name()));
      }
    }
    return jsonResponse(200, OrderedJson{{"tokens", llamacpp::tokensJson(pieces, with_pieces)}});
  }

  // post_apply_template: the chat template's text for the body's messages (and tools), as a chat request renders
  // it; {"prompt": text}.
  SimpleResponse applyTemplate(const json& doc) const {
    PromptResult prompt = chatPrompt(doc, llamacppAddGenerationPrompt(doc));
    if (!prompt.ok()) return error(400, prompt.error);
    return jsonResponse(200, OrderedJson{{"prompt", prompt.prompt.text}});
  }

  OrderedJson props() const {
    return OrderedJson{
        {"default_generation_settings", {{"params", OrderedJson::object()}, {"n_ctx", slotContext()}}},
        {"total_slots", config_.max_num_seqs},
        {"model_alias", config_.servedModel()},
        {"model_path", config_.servedModel()},
        {"modalities", {{"vision", false}, {"video", false}, {"audio", false}}},
        {"endpoint_slots", true},
        {"endpoint_props", false},
        {"endpoint_metrics", true},
        {"chat_template", kChatTemplate},
        {"bos_token", kBosMarker},
        {"eos_token", "<|end|>"},
        {"build_info", llamacpp::kBuildInfo},
        {"is_sleeping", false},
    };
  }

  // get_slots: one entry per slot. With --kv-cache-model slots they are the engine's slots, with the fields
  // server_slot::to_json adds once a slot served a task (id_task, n_prompt_tokens: the tokens it holds,
  // n_prompt_tokens_processed, n_prompt_tokens_cache); otherwise the first `num_requests_running` are processing
  // (the paged engine does not pin sequences to slots).
  OrderedJson slots(const MetricsSnapshot& snapshot) const {
    OrderedJson list = OrderedJson::array();
    for (uint32_t id = 0; id < config_.max_num_seqs; ++id) {
      const SlotView* view = id < snapshot.slots.size() ? &snapshot.slots[id] : nullptr;
      bool processing = view != nullptr ? view->processing : id < snapshot.num_requests_running;
      OrderedJson slot{
          {"id", id}, {"n_ctx", slotContext()}, {"speculative", false}, {"is_processing", processing}};
      if (view != nullptr && view->used) {
        slot["id_task"] = view->task;
        slot["n_prompt_tokens"] = view->held_tokens;
        slot["n_prompt_tokens_processed"] = view->processed_tokens;
        slot["n_prompt_tokens_cache"] = view->cached_tokens;
      }
      list.push_back(std::move(slot));
    }
    return list;
  }
};

}  // namespace

std::unique_ptr<Dialect> makeLlamacppDialect(const SimConfig& config) {
  return std::make_unique<LlamacppDialect>(config);
}

}  // namespace prefixgate::sim
