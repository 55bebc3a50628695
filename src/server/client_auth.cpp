#include "server/client_auth.h"

#include <boost/beast/http/field.hpp>

#include "auth/credentials.h"
#include "metrics/api_key_metrics.h"
#include "server/request_outcome.h"
#include "server/responses.h"

namespace prefixgate::server {
namespace http = boost::beast::http;
namespace {
constexpr std::string_view kApiKeyHeader = "x-api-key";  // Anthropic's SDKs send the key here
}  // namespace

ClientAuth::ClientAuth(const auth::Credentials& credentials, metrics::ApiKeyMetrics& metrics)
    : credentials_(credentials), metrics_(metrics), keys_(credentials.apiKeys()) {}

void ClientAuth::countRequest(int status) const {
  if (key_) metrics_.request(key_->name, status);
}

std::optional<auth::Refusal> ClientAuth::authenticate(const proxy::ClientHead& head) {
  if (!keys_) return std::nullopt;
  auto refusal = auth::authenticate(*keys_, head[http::field::authorization], head[kApiKeyHeader], key_);
  if (refusal) metrics_.unauthenticated(refusal->reason == "missing_api_key" ? "missing" : "unknown");
  return refusal;
}

std::optional<auth::Refusal> ClientAuth::authorize(std::string_view model) {
  if (!key_) return std::nullopt;
  auto refusal = auth::authorize(*key_, model, credentials_.nowMs());
  if (refusal && refusal->error == openai::GatewayError::kRateLimited) metrics_.rateLimited(key_->name, auth::limitLabel(refusal->limit));
  return refusal;
}

void ClientAuth::stripCredentials(proxy::ClientHead& head) const {
  if (!keys_ || credentials_.forwardAuthorization()) return;
  head.erase(http::field::authorization);
  head.erase(kApiKeyHeader);
}

void ClientAuth::charge(const proxy::RelayOutcome& relayed) {
  if (!key_) return;
  const bool engine_took_it =
      (relayed.response_started && relayed.status >= 200 && relayed.status < 300) || relayed.client_gone;
  const uint64_t tokens = auth::chargedTokens(relayed.prompt_tokens, relayed.output_tokens,
                                              relayed.counted_prompt_tokens, engine_took_it);
  key_->limiter->charge(tokens, credentials_.nowMs());
  if (tokens > 0) metrics_.tokens(key_->name, tokens);
}

boost::asio::awaitable<bool> writeRefusal(boost::beast::tcp_stream& stream, RequestOutcome& outcome,
                                          const auth::Refusal& refusal, bool keep_alive, Framing framing) {
  outcome.fail(refusal.error, refusal.message);
  HeaderList headers = outcome.headers();
  if (refusal.error == openai::GatewayError::kUnauthorized) headers.emplace_back("www-authenticate", "Bearer");
  if (refusal.retry_after_s > 0) headers.emplace_back("retry-after", std::to_string(refusal.retry_after_s));
  co_return co_await writeError(stream, refusal.error, refusal.message, keep_alive, headers, refusal.param, framing);
}

}  // namespace prefixgate::server
