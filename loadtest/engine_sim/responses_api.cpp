#include "engine_sim/responses_api.h"

namespace prefixgate::sim {
namespace {

using nlohmann::json;

std::string event(const json& data) {
  return "event: " + data["type"].get<std::string>() + "\ndata: " + data.dump() + "\n\n";
}

// A message's content as chat content: a string, or parts' texts (input_text/output_text/text) run together with
// one space; other parts as their JSON.
std::string contentText(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (!content.is_array()) return out;
  for (const json& part : content) {
    if (!out.empty()) out += ' ';
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if ((type == "input_text" || type == "output_text" || type == "text") && part.contains("text") &&
        part["text"].is_string())
      out += part["text"].get<std::string>();
    else
      out += part.dump();
  }
  return out;
}

bool appendItem(const json& item, json& messages, std::string& error) {
  if (item.is_string()) {
    messages.push_back(json{{"role", "user"}, {"content", item}});
    return true;
  }
  if (!item.is_object()) {
    error = "each item of 'input' must be an object";
    return false;
  }
  const std::string type = item.value("type", "");
  if (type == "function_call") {
    const std::string args = item.contains("arguments") && item["arguments"].is_string() ? item["arguments"].get<std::string>() : "";
    messages.push_back(json{{"role", "assistant"}, {"content", item.value("name", "") + " " + args}});
  } else if (type == "function_call_output") {
    const json output = item.value("output", json(""));
    messages.push_back(json{{"role", "tool"}, {"content", output.is_string() ? output.get<std::string>() : output.dump()}});
  } else if (type == "message" || (type.empty() && item.contains("content"))) {
    messages.push_back(json{{"role", item.value("role", "user")}, {"content", contentText(item.value("content", json("")))}});
  } else {
    messages.push_back(json{{"role", "user"}, {"content", item.dump()}});
  }
  return true;
}

}  // namespace

void ResponseStore::put(const std::string& id, StoredResponse stored) {
  if (capacity_ == 0) return;
  while (by_id_.size() >= capacity_ && !order_.empty()) {
    by_id_.erase(order_.front());
    order_.pop_front();
  }
  if (by_id_.insert_or_assign(id, std::move(stored)).second) order_.push_back(id);
}

const StoredResponse* ResponseStore::find(const std::string& id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

bool ResponseStore::erase(const std::string& id) { return by_id_.erase(id) > 0; }

ResponsesChat responsesChat(std::string_view body, const ResponseStore& store) {
  ResponsesChat out;
  json doc = json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    out.status = 400;
    out.error = doc.is_discarded() ? "request body is not valid JSON" : "request body must be a JSON object";
    return out;
  }
  json messages = json::array();
  if (auto prev = doc.find("previous_response_id"); prev != doc.end() && !prev->is_null()) {
    if (!prev->is_string()) {
      out.status = 400;
      out.error = "'previous_response_id' must be a string";
      return out;
    }
    out.previous_response_id = prev->get<std::string>();
    const StoredResponse* stored = store.find(out.previous_response_id);
    if (!stored) {
      out.status = 404;
      out.error = "Response with id '" + out.previous_response_id + "' not found";
      return out;
    }
    messages = stored->messages;
  }
  if (auto instructions = doc.find("instructions"); instructions != doc.end() && instructions->is_string())
    messages.push_back(json{{"role", "system"}, {"content", *instructions}});
  if (auto input = doc.find("input"); input != doc.end() && !input->is_null()) {
    if (input->is_string()) {
      messages.push_back(json{{"role", "user"}, {"content", *input}});
    } else if (input->is_array()) {
      for (const json& item : *input)
        if (!appendItem(item, messages, out.error)) {
          out.status = 400;
          return out;
        }
    } else {
      out.status = 400;
      out.error = "'input' must be a string or an array of input items";
      return out;
    }
  }
  if (messages.empty()) {
    out.status = 400;
    out.error = "'input' is required";
    return out;
  }
  json chat = {{"messages", messages}};
  for (const char* key : {"model", "stream", "tools", "cache_salt"})
    if (auto it = doc.find(key); it != doc.end()) chat[key] = *it;
  if (auto it = doc.find("max_output_tokens"); it != doc.end() && !it->is_null()) chat["max_tokens"] = *it;
  out.chat_body = std::move(chat);
  out.messages = std::move(messages);
  return out;
}

json responsesUsage(const Usage& usage) {
  return json{{"input_tokens", usage.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
              {"output_tokens", usage.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

json responseObject(const std::string& id, const std::string& message_id, int64_t created_at, const std::string& model,
                    const std::string& status, const std::string& text, const Usage* usage) {
  json output = json::array();
  if (status == "completed")
    output.push_back(json{{"type", "message"},
                          {"id", message_id},
                          {"role", "assistant"},
                          {"status", "completed"},
                          {"content", json::array({json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}})}});
  return json{{"id", id},           {"object", "response"}, {"created_at", created_at},
              {"model", model},     {"status", status},     {"output", output},
              {"parallel_tool_calls", true}, {"tool_choice", "auto"}, {"tools", json::array()},
              {"usage", usage ? responsesUsage(*usage) : json(nullptr)}};
}

std::string responseStartEvents(const json& in_progress, const std::string& message_id, uint32_t& seq) {
  std::string out;
  out += event(json{{"type", "response.created"}, {"sequence_number", seq++}, {"response", in_progress}});
  out += event(json{{"type", "response.in_progress"}, {"sequence_number", seq++}, {"response", in_progress}});
  out += event(json{{"type", "response.output_item.added"},
                    {"sequence_number", seq++},
                    {"output_index", 0},
                    {"item", {{"type", "message"}, {"id", message_id}, {"role", "assistant"}, {"status", "in_progress"},
                              {"content", json::array()}}}});
  out += event(json{{"type", "response.content_part.added"},
                    {"sequence_number", seq++},
                    {"item_id", message_id},
                    {"output_index", 0},
                    {"content_index", 0},
                    {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
  return out;
}

std::string outputTextDeltaEvent(const std::string& message_id, const std::string& delta, uint32_t& seq) {
  return event(json{{"type", "response.output_text.delta"},
                    {"sequence_number", seq++},
                    {"item_id", message_id},
                    {"output_index", 0},
                    {"content_index", 0},
                    {"delta", delta}});
}

std::string responseEndEvents(const json& completed, const std::string& message_id, const std::string& text,
                              uint32_t& seq) {
  const json part = {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
  std::string out;
  out += event(json{{"type", "response.output_text.done"}, {"sequence_number", seq++}, {"item_id", message_id},
                    {"output_index", 0}, {"content_index", 0}, {"text", text}});
  out += event(json{{"type", "response.content_part.done"}, {"sequence_number", seq++}, {"item_id", message_id},
                    {"output_index", 0}, {"content_index", 0}, {"part", part}});
  out += event(json{{"type", "response.output_item.done"}, {"sequence_number", seq++}, {"output_index", 0},
                    {"item", completed["output"][0]}});
  out += event(json{{"type", "response.completed"}, {"sequence_number", seq++}, {"response", completed}});
  return out;
}

json responseNotFound(const std::string& id) {
  return json{{"error",
               {{"message", "Response with id '" + id + "' not found"},
                {"type", "invalid_request_error"},
                {"param", nullptr},
                {"code", 404}}}};
}

}  // namespace prefixgate::sim
