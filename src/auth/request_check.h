#pragma once
// The API key decisions of one client request, as pure functions (the session writes the answer): who is calling
// (401), whether the key may use the model (403) and whether it is under its limits (429 with retry-after).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "auth/api_keys.h"
#include "openai/errors.h"

namespace prefixgate::auth {

struct Refusal {
  openai::GatewayError error = openai::GatewayError::kUnauthorized;  // 401, 403 or 429 (openai/errors.h)
  std::string reason;   // prefixgate_api_key_unauthenticated_total's label: missing_api_key, invalid_api_key, ...
  std::string message;  // for the client; names the key's name at most, never the key
  std::string param;    // the request field at fault ("" = none)
  uint32_t retry_after_s = 0;  // 429 only
  LimitKind limit = LimitKind::kNone;
};

// The key an `authorization` header value presents (`Bearer <key>`), or else an `x-api-key` header value (the key
// itself, Anthropic's form), or a 401.
std::optional<Refusal> authenticate(const ApiKeySet& keys, std::string_view authorization, std::string_view x_api_key,
                                    std::shared_ptr<const ApiKey>& key);
// 403 when `model` is outside the key's list, 429 when a limit is reached; otherwise the request counts against
// the key's request allowance at `now_ms`.
std::optional<Refusal> authorize(const ApiKey& key, std::string_view model, int64_t now_ms);

std::string_view limitLabel(LimitKind limit);  // "requests", "tokens"

}  // namespace prefixgate::auth
