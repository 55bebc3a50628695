#pragma once
// Parsing an OpenAI-compatible request body once, with simdjson on-demand, into what routing needs.
// The body itself is passed to the engine unchanged.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::openai {

// kMessages and kMessagesCountTokens: Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens).
enum class Endpoint {
  kChatCompletions,
  kCompletions,
  kEmbeddings,
  kRerank,
  kScore,
  kMessages,
  kMessagesCountTokens,
  kResponses,  // OpenAI's Responses API (openai/responses_request.h)
};
// "chat", "completions", "embeddings", "rerank", "score", "messages", "messages_count_tokens", "responses"
std::string_view endpointName(Endpoint e);
// Whether an endpoint's requests have a prompt to match against the pods' caches. Rerank and score (cross-encoder
// pairs, query x each document) do not, nor does count_tokens (the engine only tokenizes: nothing is cached, so
// recording it would predict hits that never happen): they are routed by load alone (routing.load_only_strategy),
// whatever strategy the request would get otherwise.
bool matchesPrompt(Endpoint e);
// Whether an endpoint is Anthropic's (its errors in Anthropic's shape).
bool isAnthropic(Endpoint e);

struct RequestView {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // The text whose prefix is matched: chat = tools JSON (when present and asked for) then every message's
  // content, joined by one space; completions = the prompt (a list of strings joined by one space). Anthropic
  // messages as chat: tools JSON, then `system` (a string, or its text blocks' texts run together), then each
  // content block (a string content is one block) joined by one space: a text block's text, a tool_use's name
  // and input JSON, a tool_result's content (the same way), a thinking block's thinking, any other block its raw
  // JSON; text, not the blocks' JSON, so a `cache_control` marker moving from turn to turn changes nothing. Rerank and
  // score (never matched): the raw JSON of their inputs (query then documents; text_1 then text_2), which only
  // estimates the request's size. Responses (POST /v1/responses) as chat, so one conversation hashes the same way
  // turn after turn: tools JSON, then `instructions` (as a system message), then each item of `input` (a string is
  // one item) joined by one space: a message's content (a string, or its parts: an input_text/output_text/text
  // part's text, any other part its raw JSON), a function_call's name and arguments, a function_call_output's
  // output, any other item its raw JSON.
  std::string prompt_text;
  // Completions given token ids (`prompt: [1, 2, 3]`): used as tokens directly instead of prompt_text.
  std::vector<uint32_t> prompt_token_ids;
  bool has_token_ids = false;
  // The body has a top-level `kv_transfer_params` (vLLM's KV connector instructions: which host to pull KV from or
  // keep it for). Only the gateway's own legs may carry one (disaggregation.pass_client_kv_transfer_params).
  bool has_kv_transfer_params = false;
  // The body's `user` (when a string): flow control's tenant when no key or header names one.
  std::string user;
  // Responses: the body's `previous_response_id` when it is a valid response id (openai::validResponseId; an
  // invalid one is the engine's to answer): chain affinity sends the request to the pod that produced it.
  std::string previous_response_id;
  // The body's `cache_salt` (vLLM's cache namespace, when a string): the engine mixes it into the prompt's first
  // block, so prompts under different salts (or none) never share cached blocks; the gateway hashes the same way.
  std::string cache_salt;

  // The raw JSON text of the fields the engine templates, exactly as they appear in the body (views into it: valid
  // while the body lives; the remote tokenizer sends them as they are). Chat: `messages` and `tools` ("" when
  // absent or null); completions: `prompt`; embeddings: `input` (in raw_prompt); rerank and score: none;
  // Anthropic messages: `messages` and `tools` (Anthropic-shaped: never sent to the remote tokenizer); Responses:
  // `input` (in raw_messages) and `tools`.
  std::string_view raw_messages;
  std::string_view raw_tools;
  std::string_view raw_prompt;

  // The engine's own token ids for the prompt (the remote tokenizer), set before routing.
  enum class RemoteTokens : uint8_t {
    kNone,    // not asked: the remote tokenizer is off, the strategy hashes no prompt, or the prompt is token ids
    kOk,      // remote_token_ids holds the engine's ids for the whole templated prompt
    kFailed,  // asked, no answer (timeout, no ready pod, error status, bad body): route by load alone
  };
  RemoteTokens remote_tokens = RemoteTokens::kNone;
  std::shared_ptr<const std::vector<uint32_t>> remote_token_ids;  // non-null exactly when remote_tokens == kOk

  // The request's `x-session-id` header ("" when absent; a view into the request head, valid while routing):
  // session-affinity pins a conversation by it.
  std::string_view session_id;
  // `max_completion_tokens`, else `max_tokens`, when a non-negative integer (0 = not given): the output the
  // request may ask for (prefix-cache-preble's decode estimate).
  uint32_t max_tokens = 0;
};

struct ParseError {
  int status = 0;  // 0 = no error
  std::string message;
  std::string param;  // the offending field, "" when none
  explicit operator bool() const { return status != 0; }
};

// Bytes of slack simdjson needs after the body; reserve them before reading a body into a string.
size_t paddingBytes();

// Whether `json` nests arrays and objects deeper than max_depth, anywhere (strings and malformed text aside). The
// on-demand parser skips unread values without looking at their depth, so parseRequest runs this first. Its cost
// is measured on its own by bench/route_bench.cpp (BM_JsonDepthScan).
bool nestedDeeperThan(const std::string& json, uint32_t max_depth);

// Parses `body` (whose capacity should exceed its size by paddingBytes(); if not, it is grown once).
// include_tools: put the chat request's `tools` in front of the message text.
// max_json_depth: a body whose arrays and objects nest deeper than this anywhere is refused (400), even in fields
// the gateway does not read (limits.max_json_depth).
ParseError parseRequest(Endpoint endpoint, std::string& body, bool include_tools, uint32_t max_json_depth,
                        RequestView& out);

}  // namespace prefixgate::openai
