#include "auth/request_check.h"

namespace prefixgate::auth {

std::string_view limitLabel(LimitKind limit) {
  switch (limit) {
    case LimitKind::kRequests: return "requests";
    case LimitKind::kTokens: return "tokens";
    case LimitKind::kNone: break;
  }
  return "none";
}

std::optional<Refusal> authenticate(const ApiKeySet& keys, std::string_view authorization, std::string_view x_api_key,
                                    std::shared_ptr<const ApiKey>& key) {
  std::string_view presented = bearerToken(authorization);
  if (presented.empty() && authorization.empty()) presented = x_api_key;
  if (presented.empty())
    return Refusal{openai::GatewayError::kUnauthorized, "missing_api_key",
                   "missing API key: send it as 'authorization: Bearer <key>' (or 'x-api-key: <key>')", "", 0, {}};
  key = keys.find(presented);
  if (!key) return Refusal{openai::GatewayError::kUnauthorized, "invalid_api_key", "invalid API key", "", 0, {}};
  return std::nullopt;
}

std::optional<Refusal> authorize(const ApiKey& key, std::string_view model, int64_t now_ms) {
  if (!key.allows(model))
    return Refusal{openai::GatewayError::kForbidden, "model_not_allowed",
                   "API key '" + key.name + "' may not use this model", "model", 0, {}};
  const Admission admission = key.limiter->admit(now_ms);
  if (admission.admitted) return std::nullopt;
  return Refusal{openai::GatewayError::kRateLimited,
                 "rate_limited",
                 "API key '" + key.name + "' is over its " + std::string(limitLabel(admission.limit)) +
                     "_per_minute limit; retry in " + std::to_string(admission.retry_after_s) + " s",
                 "",
                 admission.retry_after_s,
                 admission.limit};
}

}  // namespace prefixgate::auth
