#include "openai/errors.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>

namespace prefixgate::openai {

namespace {

using E = GatewayError;
struct Entry {
  GatewayError error;
  ErrorInfo info;
};
// In enum order (checked below), so a lookup is an index.
constexpr std::array kTable = {
    Entry{E::kMalformedHttp, {400, "invalid_request_error", "bad_request", false}},
    Entry{E::kBadTransferEncoding, {400, "invalid_request_error", "bad_transfer_encoding", false}},
    Entry{E::kInvalidRequest, {400, "invalid_request_error", "invalid_request", false}},
    Entry{E::kUnknownStrategy, {400, "invalid_request_error", "unknown_strategy", false}},
    Entry{E::kUnauthorized, {401, "authentication_error", "unauthorized", false}},
    Entry{E::kForbidden, {403, "permission_error", "forbidden", false}},
    Entry{E::kNotFound, {404, "not_found_error", "not_found", false}},
    Entry{E::kModelNotServed, {404, "not_found_error", "model_not_served", false}},
    Entry{E::kMethodNotAllowed, {405, "method_not_allowed", "method_not_allowed", false}},
    Entry{E::kHeaderTimeout, {408, "timeout_error", "header_timeout", false}},
    Entry{E::kBodyTooLarge, {413, "request_too_large", "body_too_large", false}},
    Entry{E::kHeaderTooLarge, {431, "request_header_fields_too_large", "request_header_too_large", false}},
    Entry{E::kRateLimited, {429, "rate_limit_error", "rate_limited", true}},
    Entry{E::kOverloaded, {429, "rate_limit_error", "overloaded", true}},
    Entry{E::kAllPodsBusy, {429, "rate_limit_error", "all_overloaded", true}},
    Entry{E::kTenantQueueFull, {429, "rate_limit_error", "tenant_queue_full", true}},
    Entry{E::kClientGone, {499, "client_closed_request", "client_gone", false}},
    Entry{E::kNoReadyPod, {503, "service_unavailable", "no_ready_pod", true}},
    Entry{E::kGatewayResources, {503, "service_unavailable", "local", true}},
    Entry{E::kBodyBufferFull, {503, "service_unavailable", "body_buffer_full", true}},
    Entry{E::kQueueFull, {503, "service_unavailable", "queue_full", true}},
    Entry{E::kQueueTimeout, {503, "service_unavailable", "queue_timeout", true}},
    Entry{E::kObjectiveUnreachable, {503, "service_unavailable", "objective_unreachable", true}},
    Entry{E::kUpstreamConnect, {502, "bad_gateway", "connect", false}},
    Entry{E::kUpstreamConnectTimeout, {504, "gateway_timeout", "connect_timeout", false}},
    Entry{E::kUpstreamClosed, {502, "bad_gateway", "closed", false}},
    Entry{E::kUpstreamBadResponse, {502, "bad_gateway", "bad_response", false}},
    Entry{E::kUpstreamEngineError, {502, "bad_gateway", "engine_error", false}},
    Entry{E::kUpstreamHeaderTimeout, {504, "gateway_timeout", "response_header_timeout", false}},
    Entry{E::kUpstreamIdleTimeout, {504, "gateway_timeout", "idle_timeout", false}},
    Entry{E::kUpstreamInterrupted, {502, "bad_gateway", "interrupted", false}},
    Entry{E::kUpstreamResponseTooLarge, {502, "bad_gateway", "response_too_large", false}},
};
constexpr bool inEnumOrder() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<size_t>(kTable[i].error) != i) return false;
  return true;
}
static_assert(inEnumOrder() && kTable.size() == static_cast<size_t>(E::kUpstreamResponseTooLarge) + 1,
              "kTable lists every GatewayError once, in enum order");

std::string body(int status, std::string_view type, std::string_view message, std::string_view param,
                 ErrorShape shape, std::string_view request_id) {
  nlohmann::json j;
  if (shape == ErrorShape::kAnthropic) {
    j["type"] = "error";
    j["error"]["type"] = anthropicErrorType(status);
    j["error"]["message"] = message;
    if (!request_id.empty()) j["request_id"] = request_id;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  j["error"]["message"] = message;
  j["error"]["type"] = type;
  j["error"]["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  j["error"]["code"] = status;
  // A client's bytes echoed in the message may not be UTF-8: replaced, never thrown.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The length of the valid UTF-8 sequence starting at text[i] (0 when it is not one).
size_t utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char c = byte(i);
  size_t n;
  uint32_t min;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
  else return 0;
  if (i + n > text.size()) return 0;
  uint32_t cp = c & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

const ErrorInfo& errorInfo(GatewayError error) { return kTable[static_cast<size_t>(error)].info; }

std::string errorBody(GatewayError error, std::string_view message, std::string_view param, ErrorShape shape,
                      std::string_view request_id) {
  const ErrorInfo& info = errorInfo(error);
  return body(info.status, info.type, message, param, shape, request_id);
}

std::string errorBody(int status, std::string_view message, std::string_view param, ErrorShape shape,
                      std::string_view request_id) {
  return body(status, errorType(status), message, param, shape, request_id);
}

std::string responsesStreamError(int status, std::string_view message, std::optional<uint64_t> last_sequence_number) {
  nlohmann::json j;
  j["type"] = "error";
  j["code"] = errorType(status);
  j["message"] = message;
  j["param"] = nullptr;
  j["sequence_number"] = last_sequence_number ? *last_sequence_number + 1 : 0;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string_view anthropicErrorType(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string_view errorType(int status) {
  for (const Entry& e : kTable)
    if (e.info.status == status) return e.info.type;
  return status >= 500 ? "server_error" : "invalid_request_error";
}

std::string printable(std::string_view text, size_t max_bytes) {
  std::string out;
  const size_t shown = std::min(text.size(), max_bytes);
  out.reserve(shown + 16);
  size_t i = 0;
  while (i < shown) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '"' || c == '\\') out += '\\';
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (c == '\n') out += "\\n", ++i;
    else if (c == '\t') out += "\\t", ++i;
    else if (size_t n = c >= 0x80 ? utf8Length(text, i) : 0; n > 0 && i + n <= shown) out.append(text, i, n), i += n;
    else out += fmt::format("\\x{:02x}", c), ++i;
  }
  if (shown < text.size()) out += fmt::format("...({} bytes)", text.size());
  return out;
}

}  // namespace prefixgate::openai
