#pragma once
// The prefixgate_api_key_* series: requests per API key name and status, tokens charged, rate-limit refusals, and
// requests refused before a key was known. Labels are key names from the keys file (never the keys), so the
// series are bounded by the file. Thread-safe (prometheus families lock internally).
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace prefixgate::metrics {

class ApiKeyMetrics {
 public:
  explicit ApiKeyMetrics(prometheus::Registry& registry);
  // A finished request made with key `name`, whatever its outcome.
  void request(const std::string& name, int status);
  void tokens(const std::string& name, uint64_t tokens);
  // A request of `name` refused by its `limit` ("requests" or "tokens").
  void rateLimited(const std::string& name, std::string_view limit);
  // A request refused with 401: `reason` "missing" (no bearer key) or "unknown" (no such key).
  void unauthenticated(std::string_view reason);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Counter>& rate_limited_;
  prometheus::Family<prometheus::Counter>& unauthenticated_;
};

}  // namespace prefixgate::metrics
