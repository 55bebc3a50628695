#pragma once
// Client API keys (auth.api_keys_file, CONTRACT.md "API keys file"): parsing and validating the file, the
// immutable key set that event loops read, and the constant-time lookup of a presented key. Pure: no sockets, no
// clocks (rate limits live in key_limiter.h and take the time as an argument).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "auth/key_limiter.h"

namespace prefixgate::auth {

// One entry of the keys file, as written.
struct ApiKeySpec {
  std::string name;
  std::string key;
  std::vector<std::string> models;  // empty = every model
  std::optional<uint64_t> requests_per_minute;
  std::optional<uint64_t> tokens_per_minute;
};

// Parses the YAML text of a keys file. Every problem is appended as "<source>: keys[i] (name).field: what is
// wrong"; no message ever contains a key.
std::vector<ApiKeySpec> parseApiKeysFile(const std::string& text, const std::string& source,
                                         std::vector<std::string>& problems);
std::vector<ApiKeySpec> loadApiKeysFile(const std::string& path, std::vector<std::string>& problems);

// True when `a` and `b` hold the same bytes. Its time depends only on the two lengths, never on the bytes or on
// where they first differ, so a client cannot find a key byte by byte.
bool constantTimeEquals(std::string_view a, std::string_view b);

// A configured key as the request path sees it. Its limiter is shared with the sets that keep the same name.
struct ApiKey {
  std::string name;
  std::string key;
  std::vector<std::string> models;
  std::shared_ptr<KeyLimiter> limiter;  // never null
  bool allows(std::string_view model) const;
};

// An immutable set of keys (one per file version), read concurrently by every event loop.
class ApiKeySet {
 public:
  // Limiters of names found in `previous` (may be null) are kept, with the new limits, so a reload does not reset
  // a key's windows; new names start with full windows at `now_ms`.
  ApiKeySet(std::vector<ApiKeySpec> specs, const ApiKeySet* previous, int64_t now_ms);
  // The key whose secret equals `presented`, or null. Compares against every key, in constant time each.
  std::shared_ptr<const ApiKey> find(std::string_view presented) const;
  const std::vector<std::shared_ptr<const ApiKey>>& keys() const { return keys_; }

 private:
  std::vector<std::shared_ptr<const ApiKey>> keys_;
};

// The token of an `authorization: Bearer <token>` header value ("" when it is not one).
std::string_view bearerToken(std::string_view authorization);

}  // namespace prefixgate::auth
