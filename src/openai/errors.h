#pragma once
// Every error the gateway writes, in one table: a GatewayError kind gives the HTTP status, OpenAI's error `type`,
// the metric label (prefixgate_requests_total's reason, the log line) and whether a `retry-after` goes with it.
// Bodies are OpenAI-shaped: {"error": {"message", "type", "param", "code"}}, or Anthropic-shaped for the Messages
// API's paths ({"type": "error", "error": {"type", "message"}}, its type derived from the status: one table, two
// shapes), and writing one never throws: bytes that are not UTF-8 (a client's path, model or header echoed in the
// message) are replaced.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace prefixgate::openai {

enum class GatewayError : uint8_t {
  // The client's request (4xx).
  kMalformedHttp,            // 400: not HTTP/1.x, bad framing
  kBadTransferEncoding,      // 400: a Transfer-Encoding other than one final "chunked"
  kInvalidRequest,           // 400: the body is not a valid OpenAI request (JSON, fields, nesting depth)
  kUnknownStrategy,          // 400: routing-strategy names no strategy
  kUnauthorized,             // 401: no or unknown API key
  kForbidden,                // 403: the key may not use that model
  kNotFound,                 // 404: unknown path
  kModelNotServed,           // 404: no pod serves that model
  kMethodNotAllowed,         // 405
  kHeaderTimeout,            // 408: the head did not arrive within limits.header_timeout_ms
  kBodyTooLarge,             // 413: limits.max_body_bytes
  kHeaderTooLarge,           // 431: limits.max_header_bytes (request head, chunk lines, trailers)
  kRateLimited,              // 429: over the API key's requests or tokens per minute
  kOverloaded,               // 429: limits.max_in_flight
  kAllPodsBusy,              // 429: every pod at limits.max_in_flight_per_pod
  kTenantQueueFull,          // 429: flow control: the tenant's own queue bound (its quota)
  kClientGone,               // 499: the client closed its connection before the end (never written)
  // The gateway or the engines (5xx).
  kNoReadyPod,               // 503: the model's pods are all down or ejected
  kGatewayResources,         // 503: the gateway could not open a socket (EMFILE, ENFILE, ENOBUFS, EADDRNOTAVAIL)
  kBodyBufferFull,           // 503: the request's body would take the bodies held over limits.max_buffered_body_bytes
  kQueueFull,                // 503: flow control: the gateway's queue is full (its capacity)
  kQueueTimeout,             // 503: flow control: waited in the queue past its class's max_wait_ms or its TTFT objective
  kObjectiveUnreachable,     // 503: flow control: predicted at admission to miss its TTFT objective on every pod
  // What went wrong with the engine (proxy::FailureKind maps one to one).
  kUpstreamConnect,          // 502: connection refused or unreachable, or the host name did not resolve
  kUpstreamConnectTimeout,   // 504: no connection within upstream.connect_timeout_ms
  kUpstreamClosed,           // 502: the pod reset or closed the connection before answering
  kUpstreamBadResponse,      // 502: the pod's response head is not valid HTTP
  kUpstreamEngineError,      // 502: the pod answered 5xx (its own answer is relayed when no other pod is tried)
  kUpstreamHeaderTimeout,    // 504: no response head within upstream.response_header_timeout_ms
  kUpstreamIdleTimeout,      // 504: the response stalled longer than upstream.idle_timeout_ms
  kUpstreamInterrupted,      // 502: the response body was cut off (reset, close, bad framing)
  kUpstreamResponseTooLarge, // 502: the response exceeded upstream.max_response_bytes
};

struct ErrorInfo {
  int status;
  std::string_view type;   // OpenAI's error type
  std::string_view label;  // metric label and log reason
  bool retry_after;        // a retry-after header goes with it (1 s unless the caller knows better)
};

const ErrorInfo& errorInfo(GatewayError error);

// Which API's error body a client gets: chosen by the request's path (Anthropic's for /v1/messages and
// /v1/messages/count_tokens). The Responses API's bodies are OpenAI's; only the event that ends a stream the gateway
// cuts differs (responsesStreamError).
enum class ErrorShape : uint8_t { kOpenAI, kAnthropic, kResponses };

// The JSON body for an error of `error`'s kind; `param` empty is written as null (OpenAI's shape only).
// `request_id`: Anthropic's shape carries it as a top-level "request_id" (its published error body); "" leaves it out.
std::string errorBody(GatewayError error, std::string_view message, std::string_view param = {},
                      ErrorShape shape = ErrorShape::kOpenAI, std::string_view request_id = {});
// The same shape for a status of its own (e.g. an engine error relayed inside a stream).
std::string errorBody(int status, std::string_view message, std::string_view param = {},
                      ErrorShape shape = ErrorShape::kOpenAI, std::string_view request_id = {});
// The data of the Responses API's `error` stream event (https://platform.openai.com/docs/api-reference/
// responses-streaming/error): {"type":"error","code","message","param":null,"sequence_number"}, numbered after the
// last event the client was sent (`last_sequence_number`; none seen: 0).
std::string responsesStreamError(int status, std::string_view message, std::optional<uint64_t> last_sequence_number);

// The OpenAI error `type` for an HTTP status (400 invalid_request_error, 404 not_found_error, ...).
std::string_view errorType(int status);
// Anthropic's error `type` for an HTTP status: 401 authentication_error, 403 permission_error, 404
// not_found_error, 429 rate_limit_error, 503 overloaded_error, other 5xx api_error, other 4xx invalid_request_error.
std::string_view anthropicErrorType(int status);

// `text` with bytes that are not valid UTF-8 replaced by U+FFFD, control characters escaped (\n, \x01), and cut
// to `max_bytes` (with a "...(N bytes)" suffix): safe in a log line or a header value.
std::string printable(std::string_view text, size_t max_bytes = 256);

}  // namespace prefixgate::openai
