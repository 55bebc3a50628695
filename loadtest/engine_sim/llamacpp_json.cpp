#include "engine_sim/llamacpp_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

namespace prefixgate::sim::llamacpp {
namespace {

// The chunk envelope of to_json_oaicompat_chat_stream: choices, created, id, model, system_fingerprint, object.
OrderedJson chatChunk(const CompletionMeta& meta, OrderedJson choices) {
  return OrderedJson{{"choices", std::move(choices)},
                     {"created", meta.created},
                     {"id", meta.id},
                     {"model", meta.model},
                     {"system_fingerprint", kBuildInfo},
                     {"object", "chat.completion.chunk"}};
}

OrderedJson deltaChoice(OrderedJson finish_reason, OrderedJson delta) {
  return OrderedJson::array({OrderedJson{{"finish_reason", std::move(finish_reason)}, {"index", 0},
                                         {"delta", std::move(delta)}}});
}

// to_json_oaicompat's shape: choices[{text, index, logprobs, finish_reason}], created, model, system_fingerprint,
// object, (usage,) id.
OrderedJson textCompletion(const CompletionMeta& meta, const std::string& text, OrderedJson finish_reason) {
  OrderedJson choice{
      {"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", std::move(finish_reason)}};
  return OrderedJson{{"choices", OrderedJson::array({std::move(choice)})},
                     {"created", meta.created},
                     {"model", meta.model},
                     {"system_fingerprint", kBuildInfo},
                     {"object", "text_completion"}};
}

// is_valid_utf8 of server-common.cpp: well-formed lead and continuation bytes, nothing cut short.
bool validUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    if (lead <= 0x7F) length = 1;
    else if ((lead & 0xE0) == 0xC0) length = 2;
    else if ((lead & 0xF0) == 0xE0) length = 3;
    else if ((lead & 0xF8) == 0xF0) length = 4;
    if (length == 0 || i + length > text.size()) return false;
    for (size_t k = 1; k < length; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
    i += length;
  }
  return true;
}

}  // namespace

std::string errorType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

OrderedJson errorJson(int status, std::string_view message) {
  return OrderedJson{{"error", {{"code", status}, {"message", std::string(message)}, {"type", errorType(status)}}}};
}

OrderedJson timingsJson(const Timings& t) {
  uint32_t steps = t.predicted_n > 0 ? t.predicted_n - 1 : 0;
  return OrderedJson{
      {"cache_n", t.cache_n},
      {"prompt_n", t.prompt_n},
      {"prompt_ms", t.prompt_ms},
      {"prompt_per_token_ms", t.prompt_n > 0 ? t.prompt_ms / t.prompt_n : 0.0},
      {"prompt_per_second", t.prompt_ms > 0 ? 1e3 / t.prompt_ms * t.prompt_n : 0.0},
      {"predicted_n", t.predicted_n},
      {"predicted_ms", t.predicted_ms},
      {"predicted_per_token_ms", steps > 0 ? t.predicted_ms / steps : 0.0},
      {"predicted_per_second", t.predicted_ms > 0 ? 1e3 / t.predicted_ms * steps : 0.0},
  };
}

OrderedJson usageJson(const Usage& usage) {
  return OrderedJson{{"completion_tokens", usage.completion_tokens},
                     {"prompt_tokens", usage.prompt_tokens},
                     {"total_tokens", usage.completion_tokens + usage.prompt_tokens},
                     {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

std::vector<OrderedJson> tokenChunks(const CompletionMeta& meta, const std::string& text, bool first) {
  std::vector<OrderedJson> chunks;
  if (meta.endpoint == Endpoint::kCompletion) {
    OrderedJson chunk = textCompletion(meta, text, nullptr);
    chunk["id"] = meta.id;
    chunks.push_back(std::move(chunk));
    return chunks;
  }
  // "We have to send an initial update to conform to openai behavior".
  if (first) chunks.push_back(chatChunk(meta, deltaChoice(nullptr, {{"role", "assistant"}, {"content", nullptr}})));
  chunks.push_back(chatChunk(meta, deltaChoice(nullptr, {{"content", text}})));
  return chunks;
}

std::vector<OrderedJson> finalChunks(const CompletionMeta& meta, std::string_view finish_reason, bool include_usage,
                                     const Usage& usage, const Timings& timings) {
  std::vector<OrderedJson> chunks;
  if (meta.endpoint == Endpoint::kCompletion) {
    OrderedJson chunk = textCompletion(meta, "", std::string(finish_reason));
    chunk["usage"] = llamacpp::usageJson(usage);
    chunk["id"] = meta.id;
    chunks.push_back(std::move(chunk));
  } else {
    chunks.push_back(chatChunk(meta, deltaChoice(std::string(finish_reason), OrderedJson::object())));
    if (include_usage) {
      OrderedJson chunk = chatChunk(meta, OrderedJson::array());
      chunk["usage"] = llamacpp::usageJson(usage);
      chunks.push_back(std::move(chunk));
    }
  }
  chunks.back()["timings"] = timingsJson(timings);
  return chunks;
}

OrderedJson completionBody(const CompletionMeta& meta, const std::string& text, std::string_view finish_reason,
                           const Usage& usage, const Timings& timings) {
  OrderedJson body;
  if (meta.endpoint == Endpoint::kCompletion) {
    body = textCompletion(meta, text, std::string(finish_reason));
  } else {
    OrderedJson choice{{"finish_reason", std::string(finish_reason)},
                       {"index", 0},
                       {"message", {{"role", "assistant"}, {"content", text}}}};
    body = OrderedJson{{"choices", OrderedJson::array({std::move(choice)})},
                       {"created", meta.created},
                       {"model", meta.model},
                       {"system_fingerprint", kBuildInfo},
                       {"object", "chat.completion"}};
  }
  body["usage"] = llamacpp::usageJson(usage);
  body["id"] = meta.id;
  body["timings"] = timingsJson(timings);
  return body;
}

std::string sseEvents(const std::vector<OrderedJson>& chunks) {
  std::string out;
  for (const auto& chunk : chunks)
    out += "data: " + chunk.dump(-1, ' ', false, OrderedJson::error_handler_t::replace) + "\n\n";
  return out;
}

OrderedJson tokensJson(const std::vector<TokenPiece>& pieces, bool with_pieces) {
  OrderedJson tokens = OrderedJson::array();
  for (const TokenPiece& token : pieces) {
    if (!with_pieces) {
      tokens.push_back(token.id);
      continue;
    }
    OrderedJson piece;
    if (validUtf8(token.piece)) {
      piece = token.piece;
    } else {
      piece = OrderedJson::array();
      for (unsigned char byte : token.piece) piece.push_back(static_cast<int>(byte));
    }
    tokens.push_back(OrderedJson{{"id", token.id}, {"piece", std::move(piece)}});
  }
  return tokens;
}

std::string metricsText(const MetricsSnapshot& s) {
  struct Item {
    const char* name;
    const char* help;
    double value;
  };
  const EngineActivity& total = s.activity;
  const EngineActivity& window = s.window;
  const Item counters[] = {
      {"prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
       static_cast<double>(total.prefill_tokens)},
      {"prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
       static_cast<double>(s.counters.prefix_cache_hits)},
      {"prompt_seconds_total", "Total time spent processing prompts", total.prefill_ms / 1e3},
      {"tokens_predicted_total", "Number of generation tokens processed",
       static_cast<double>(total.predicted_tokens)},
      {"tokens_predicted_seconds_total", "Total time spent generating tokens", total.predicted_ms / 1e3},
      {"n_decode_total",
       "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
       static_cast<double>(total.steps)},
      {"n_tokens_max", "Largest observed sequence length (prompt + generation)",
       static_cast<double>(total.max_sequence_tokens)},
      {"spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", 0},
      {"spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model", 0},
      {"spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps", 0},
  };
  // The rates are over the window since the previous scrape, as llama-server resets its buckets on each scrape.
  const Item gauges[] = {
      {"prompt_tokens_seconds", "Average prompt throughput in tokens/s",
       window.prefill_ms > 0 ? static_cast<double>(window.prefill_tokens) / window.prefill_ms * 1e3 : 0},
      {"predicted_tokens_seconds", "Average generation throughput in tokens/s",
       window.predicted_ms > 0 ? static_cast<double>(window.predicted_steps) / window.predicted_ms * 1e3 : 0},
      {"requests_processing", "Number of requests processing", static_cast<double>(s.num_requests_running)},
      {"requests_deferred", "Number of requests deferred", static_cast<double>(s.num_requests_waiting)},
      {"n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
       static_cast<double>(total.busy_slot_steps) / std::max(static_cast<double>(total.steps), 1.0)},
  };
  std::string out;
  auto add = [&out](const char* type, const auto& items) {
    for (const Item& item : items)
      fmt::format_to(std::back_inserter(out), "# HELP llamacpp:{} {}\n# TYPE llamacpp:{} {}\nllamacpp:{} {:g}\n",
                     item.name, item.help, item.name, type, item.name, item.value);
  };
  add("counter", counters);
  add("gauge", gauges);
  return out;
}

}  // namespace prefixgate::sim::llamacpp
