#include "openai/errors.h"

#include <nlohmann/json.hpp>

namespace prefixgate::openai {

std::string_view errorType(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "method_not_allowed";
    case 408: return "timeout_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 431: return "request_header_fields_too_large";
    case 502: return "bad_gateway";
    case 503: return "service_unavailable";
    case 504: return "gateway_timeout";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string errorBody(int status, std::string_view message, std::string_view param) {
  nlohmann::json j;
  j["error"]["message"] = message;
  j["error"]["type"] = errorType(status);
  j["error"]["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  j["error"]["code"] = status;
  return j.dump();
}

}  // namespace prefixgate::openai
