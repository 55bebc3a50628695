#pragma once
// The API key side of one client request (auth.api_keys_file): authenticate on the head, authorize once the
// model is known, charge the response's tokens at the end, and count the request under the key's name. With no
// keys file every step lets the request through. Lives on the session's coroutine; its credentials and series
// are handed to it (RequestPreparation::clientAuth), so it is built without a gateway in tests.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <memory>
#include <string>
#include <string_view>

#include "auth/request_check.h"
#include "proxy/relay.h"
#include "server/responses.h"

namespace prefixgate::auth {
class Credentials;
}
namespace prefixgate::metrics {
class ApiKeyMetrics;
}

namespace prefixgate::server {

class RequestOutcome;

class ClientAuth {
 public:
  // Takes the key set in force now. `credentials` and `metrics` outlive it.
  ClientAuth(const auth::Credentials& credentials, metrics::ApiKeyMetrics& metrics);
  ClientAuth(const ClientAuth&) = delete;
  ClientAuth& operator=(const ClientAuth&) = delete;

  // On the request head: the key it presents in `authorization: Bearer <key>`, or else in `x-api-key` (Anthropic's
  // header), or a 401; keyName() names it from then on.
  std::optional<auth::Refusal> authenticate(const proxy::ClientHead& head);
  // Once the model is known: 403 outside the key's models, 429 over a limit (counted against the key's requests).
  std::optional<auth::Refusal> authorize(std::string_view model);
  // The name of the key the request presented (for the log line; never the key itself); null when none.
  const std::string* keyName() const { return key_ ? &key_->name : nullptr; }
  // The key itself (its flow-control class and objective); null when none.
  const auth::ApiKey* key() const { return key_.get(); }
  // Whether the key may see `model` in /v1/models.
  bool allows(std::string_view model) const { return !key_ || key_->allows(model); }
  // The engine gets the client's authorization and x-api-key headers only without keys, or with
  // auth.forward_authorization.
  void stripCredentials(proxy::ClientHead& head) const;
  // Charges the tokens of a relayed response (prompt + completion) to the key: the engine's usage, else the
  // gateway's count of the prompt (auth::chargedTokens).
  void charge(const proxy::RelayOutcome& relayed);
  // The request ended with `status`: counts it under the key's name (nothing without a key). Once per request.
  void countRequest(int status) const;

 private:
  const auth::Credentials& credentials_;
  metrics::ApiKeyMetrics& metrics_;
  std::shared_ptr<const auth::ApiKeySet> keys_;  // the set in force when the request began; null = no keys
  std::shared_ptr<const auth::ApiKey> key_;
};

// Writes a refusal (the framing's error shape, retry-after on 429) and records it in the outcome; returns false
// when the write failed.
boost::asio::awaitable<bool> writeRefusal(boost::beast::tcp_stream& stream, RequestOutcome& outcome,
                                          const auth::Refusal& refusal, bool keep_alive, Framing framing = {});

}  // namespace prefixgate::server
