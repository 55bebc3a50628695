#pragma once
// vLLM's OpenAI Responses API (/v1/responses, GET/DELETE /v1/responses/{id}, POST .../cancel) in the simulator, as
// pure functions and one bounded store: a Responses body turned into the chat request the engine computes (its
// stored conversation first when it names previous_response_id), the answers (a whole response, the typed SSE
// events of a stream with sequence numbers) and the store of the responses this pod produced (a chained request
// naming a response another pod produced is answered 404, as a real engine's would be).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "engine_sim/openai_json.h"

namespace prefixgate::sim {

// One response this pod produced: its JSON (as GET answers it) and its conversation as chat messages (the input
// and the assistant's output), which a request naming it as previous_response_id continues.
struct StoredResponse {
  nlohmann::json response;
  nlohmann::json messages;
};

// The responses this pod produced, the oldest dropped beyond `capacity`.
class ResponseStore {
 public:
  static constexpr size_t kDefaultCapacity = 1000;
  explicit ResponseStore(size_t capacity = kDefaultCapacity) : capacity_(capacity) {}
  void put(const std::string& id, StoredResponse stored);
  const StoredResponse* find(const std::string& id) const;
  bool erase(const std::string& id);
  size_t size() const { return by_id_.size(); }

 private:
  size_t capacity_;
  std::deque<std::string> order_;  // ids, oldest first (an erased id stays until it reaches the front)
  std::unordered_map<std::string, StoredResponse> by_id_;
};

// A Responses body as the chat body the engine computes: {"model", "messages": stored conversation, then
// `instructions` as a system message (first, when no conversation precedes), then `input` (a string: one user
// message; items: messages with string or part content (input_text/output_text: text), function_call (name and
// arguments) and function_call_output (output) as messages), "max_tokens": max_output_tokens, "stream", "tools",
// "cache_salt"}. `messages` receives the conversation (without the answer). Errors: status and message.
struct ResponsesChat {
  nlohmann::json chat_body;
  nlohmann::json messages;
  std::string previous_response_id;
  int status = 0;  // non-zero: refused (400 bad body, 404 unknown previous_response_id)
  std::string error;
};
ResponsesChat responsesChat(std::string_view body, const ResponseStore& store);

// The response object: {"id", "object": "response", "created_at", "model", "status", "output": [message with one
// output_text part] (empty while in progress), "usage" (when completed), ...}.
nlohmann::json responseObject(const std::string& id, const std::string& message_id, int64_t created_at,
                              const std::string& model, const std::string& status, const std::string& text,
                              const Usage* usage);
// The Responses usage: {"input_tokens", "input_tokens_details": {"cached_tokens"}, "output_tokens",
// "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens"}.
nlohmann::json responsesUsage(const Usage& usage);

// The typed events of a stream, each "event: <type>\ndata: <json>\n\n" with its sequence_number (counted in `seq`).
std::string responseStartEvents(const nlohmann::json& in_progress, const std::string& message_id, uint32_t& seq);
std::string outputTextDeltaEvent(const std::string& message_id, const std::string& delta, uint32_t& seq);
std::string responseEndEvents(const nlohmann::json& completed, const std::string& message_id, const std::string& text,
                              uint32_t& seq);

// {"error": {"message": "Response with id '<id>' not found", "type": "invalid_request_error", "param": null,
// "code": 404}} (an OpenAI-shaped 404 body).
nlohmann::json responseNotFound(const std::string& id);

}  // namespace prefixgate::sim
