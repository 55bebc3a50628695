#include "engine_sim/anthropic_json.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

// A content block's text, as the prompt sees it ("" for a block with none).
void appendBlocks(const json& content, std::string& out);

void appendBlock(const json& block, std::string& out) {
  if (!block.is_object()) return;
  const std::string type = block.value("type", "");
  if (type == "text" && block.contains("text") && block["text"].is_string()) {
    out += block["text"].get<std::string>();
  } else if (type == "thinking" && block.contains("thinking") && block["thinking"].is_string()) {
    out += block["thinking"].get<std::string>();
  } else if (type == "tool_use") {
    out += block.value("name", "") + " " + (block.contains("input") ? block["input"].dump() : "{}");
  } else if (type == "tool_result") {
    if (block.contains("content")) appendBlocks(block["content"], out);
  } else {
    out += block.dump();
  }
}

void appendBlocks(const json& content, std::string& out) {
  if (content.is_string()) {
    out += content.get<std::string>();
  } else if (content.is_array()) {
    for (const json& block : content) appendBlock(block, out);
  }
}

}  // namespace

PromptResult anthropicPrompt(const json& body) {
  PromptResult result;
  auto messages = body.is_object() ? body.find("messages") : body.end();
  if (!body.is_object() || messages == body.end() || !messages->is_array() || messages->empty()) {
    result.error = "'messages' must be a non-empty array";
    return result;
  }
  json chat = json::array();
  if (auto system = body.find("system"); system != body.end() && !system->is_null()) {
    if (!system->is_string() && !system->is_array()) {
      result.error = "'system' must be a string or an array of text blocks";
      return result;
    }
    std::string text;
    appendBlocks(*system, text);
    chat.push_back(json{{"role", "system"}, {"content", text}});
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      result.error = "messages." + std::to_string(i) + ".role: Field required";
      return result;
    }
    const json content = message.value("content", json(nullptr));
    if (!content.is_string() && !content.is_array()) {
      result.error = "messages." + std::to_string(i) + ".content: Input should be a valid string or list";
      return result;
    }
    std::string text;
    appendBlocks(content, text);
    chat.push_back(json{{"role", message["role"]}, {"content", text}});
  }
  auto tools = body.find("tools");
  chatTemplate(chat, tools == body.end() ? nullptr : &*tools, true, result.prompt, result.error);
  return result;
}

std::string_view stopReason(std::string_view finish_reason) {
  return finish_reason == "length" ? "max_tokens" : "end_turn";
}

json messageResponse(const CompletionMeta& meta, const std::string& text, std::string_view finish_reason,
                     const Usage& usage) {
  return json{{"id", meta.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", meta.model},
              {"content", json::array({json{{"type", "text"}, {"text", text}}})},
              {"stop_reason", std::string(stopReason(finish_reason))},
              {"stop_sequence", nullptr},
              {"usage", {{"input_tokens", usage.prompt_tokens}, {"output_tokens", usage.completion_tokens}}}};
}

std::string namedEvent(const json& event) {
  return "event: " + event.value("type", "") + "\ndata: " + event.dump() + "\n\n";
}

std::string messageStartEvents(const CompletionMeta& meta, const Usage& usage) {
  json message{{"id", meta.id},
               {"type", "message"},
               {"role", "assistant"},
               {"model", meta.model},
               {"content", json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", {{"input_tokens", usage.prompt_tokens}, {"output_tokens", 1}}}};
  return namedEvent(json{{"type", "message_start"}, {"message", std::move(message)}}) +
         namedEvent(json{{"type", "content_block_start"},
                         {"index", 0},
                         {"content_block", {{"type", "text"}, {"text", ""}}}});
}

std::string textDeltaEvent(const std::string& text) {
  return namedEvent(
      json{{"type", "content_block_delta"}, {"index", 0}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
}

std::string messageEndEvents(std::string_view finish_reason, const Usage& usage) {
  return namedEvent(json{{"type", "content_block_stop"}, {"index", 0}}) +
         namedEvent(json{{"type", "message_delta"},
                         {"delta", {{"stop_reason", std::string(stopReason(finish_reason))}, {"stop_sequence", nullptr}}},
                         {"usage", {{"output_tokens", usage.completion_tokens}}}}) +
         namedEvent(json{{"type", "message_stop"}});
}

json anthropicErrorJson(int status, std::string_view message) {
  std::string type = status >= 500 ? "api_error" : "invalid_request_error";
  if (status == 404) type = "not_found_error";
  if (status == 429) type = "rate_limit_error";
  if (status == 503) type = "overloaded_error";
  return json{{"type", "error"}, {"error", {{"type", type}, {"message", std::string(message)}}}};
}

}  // namespace prefixgate::sim
