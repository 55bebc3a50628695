#include "metrics/api_key_metrics.h"

namespace prefixgate::metrics {

ApiKeyMetrics::ApiKeyMetrics(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("prefixgate_api_key_requests_total")
                    .Help("Client requests made with an API key, by key name and HTTP status")
                    .Register(registry)),
      tokens_(prometheus::BuildCounter()
                  .Name("prefixgate_api_key_tokens_total")
                  .Help("Prompt + completion tokens charged to an API key (the engines' usage, else the "
                        "gateway's count of the prompt and the streamed chunks), by key name")
                  .Register(registry)),
      rate_limited_(prometheus::BuildCounter()
                        .Name("prefixgate_api_key_rate_limited_total")
                        .Help("Requests refused with 429 by an API key's limit, by key name and limit")
                        .Register(registry)),
      unauthenticated_(prometheus::BuildCounter()
                           .Name("prefixgate_api_key_unauthenticated_total")
                           .Help("Requests refused with 401: reason missing (no bearer key) or unknown (no such key)")
                           .Register(registry)) {}

void ApiKeyMetrics::request(const std::string& name, int status) {
  requests_.Add({{"key", name}, {"status", std::to_string(status)}}).Increment();
}

void ApiKeyMetrics::tokens(const std::string& name, uint64_t tokens) {
  tokens_.Add({{"key", name}}).Increment(static_cast<double>(tokens));
}

void ApiKeyMetrics::rateLimited(const std::string& name, std::string_view limit) {
  rate_limited_.Add({{"key", name}, {"limit", std::string(limit)}}).Increment();
}

void ApiKeyMetrics::unauthenticated(std::string_view reason) {
  unauthenticated_.Add({{"reason", std::string(reason)}}).Increment();
}

}  // namespace prefixgate::metrics
