#pragma once
// The API key side of one client request (auth.api_keys_file): authenticate on the head, authorize once the
// model is known, charge the response's tokens at the end, and count the request under the key's name. With no
// keys file every step lets the request through. Lives on the session's coroutine, next to its RequestOutcome.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <memory>
#include <string_view>

#include "auth/request_check.h"
#include "proxy/relay.h"

namespace prefixgate::server {

class Gateway;
class RequestOutcome;

class ClientAuth {
 public:
  ClientAuth(Gateway& gateway, RequestOutcome& outcome);
  ~ClientAuth();  // counts the request under the key's name, with its final status
  ClientAuth(const ClientAuth&) = delete;
  ClientAuth& operator=(const ClientAuth&) = delete;

  // On the request head: the key it presents (a 401 otherwise). Records the key's name in the outcome.
  std::optional<auth::Refusal> authenticate(const proxy::ClientHead& head);
  // Once the model is known: 403 outside the key's models, 429 over a limit.
  std::optional<auth::Refusal> authorize(std::string_view model);
  // Whether the key may see `model` in /v1/models.
  bool allows(std::string_view model) const { return !key_ || key_->allows(model); }
  // The engine gets the client's authorization header only without keys, or with auth.forward_authorization.
  void stripCredentials(proxy::ClientHead& head) const;
  // Charges the tokens of a relayed response (prompt + completion) to the key: the engine's usage, else the
  // gateway's count of the prompt (auth::chargedTokens).
  void charge(const proxy::RelayOutcome& relayed);

 private:
  Gateway& gateway_;
  RequestOutcome& outcome_;
  std::shared_ptr<const auth::ApiKeySet> keys_;  // the set in force when the request began; null = no keys
  std::shared_ptr<const auth::ApiKey> key_;
};

// Writes a refusal (OpenAI error shape, retry-after on 429) and records it in the outcome; returns false when the
// write failed.
boost::asio::awaitable<bool> writeRefusal(boost::beast::tcp_stream& stream, RequestOutcome& outcome,
                                          const auth::Refusal& refusal, bool keep_alive);

}  // namespace prefixgate::server
