#pragma once
// Client API keys (auth.api_keys_file, CONTRACT.md "API keys file"): parsing and validating the file, the
// immutable key set that event loops read, and the lookup of a presented key by its digest. Pure: no sockets, no
// clocks (rate limits live in key_limiter.h and take the time as an argument).
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
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
  std::string priority_class;            // flow control: the class of the key's requests ("" = the header's)
  std::optional<uint64_t> ttft_slo_ms;   // flow control: the key's TTFT objective (absent = the model's, header's)
};

// Parses the YAML text of a keys file. Every problem is appended as "<source>: keys[i] (name).field: what is
// wrong"; no message ever contains a key. `priority_classes`: flow control's class names (empty when it is off: a
// key's priority_class is then not checked, and not used).
std::vector<ApiKeySpec> parseApiKeysFile(const std::string& text, const std::string& source,
                                         std::vector<std::string>& problems,
                                         const std::vector<std::string>& priority_classes = {});
std::vector<ApiKeySpec> loadApiKeysFile(const std::string& path, std::vector<std::string>& problems,
                                        const std::vector<std::string>& priority_classes = {});

// True when `a` and `b` hold the same bytes. Its time depends only on the two lengths, never on the bytes or on
// where they first differ, so a client cannot find a key byte by byte.
bool constantTimeEquals(std::string_view a, std::string_view b);

// A configured key as the request path sees it. Its limiter is shared with the sets that keep the same name.
struct ApiKey {
  std::string name;
  std::string key;
  std::vector<std::string> models;
  std::string priority_class;  // flow control ("" = none)
  uint32_t ttft_slo_ms = 0;    // flow control (0 = none)
  std::shared_ptr<KeyLimiter> limiter;  // never null
  bool allows(std::string_view model) const;
};

// The SHA-256 digest of a key, under which a set finds it (none when the digest could not be computed).
using KeyDigest = std::array<unsigned char, 32>;
std::optional<KeyDigest> keyDigest(std::string_view key);

// An immutable set of keys (one per file version), read concurrently by every event loop.
class ApiKeySet {
 public:
  // Limiters of names found in `previous` (may be null) are kept, with the new limits, so a reload does not reset
  // a key's windows; new names start with full windows at `now_ms`.
  ApiKeySet(std::vector<ApiKeySpec> specs, const ApiKeySet* previous, int64_t now_ms);
  // The key whose secret equals `presented`, or null. One digest of `presented` looked up in a hash map (the digest
  // compared in constant time): the cost does not grow with the number of keys, and a token longer than the
  // longest key is refused without being read. Nothing in its time depends on where a key's bytes differ.
  std::shared_ptr<const ApiKey> find(std::string_view presented) const;
  const std::vector<std::shared_ptr<const ApiKey>>& keys() const { return keys_; }
  size_t longestKeyBytes() const { return longest_key_bytes_; }
  // How many presented tokens find() digested on the calling thread so far (a token refused by its length is not):
  // lets a test see that an over-long token is never read. Per thread, so counting shares nothing between threads.
  static uint64_t digestsOnThisThread();

 private:
  struct DigestHash {
    size_t operator()(const KeyDigest& d) const {
      size_t h;  // the digest is uniform already: its first bytes are the hash
      std::memcpy(&h, d.data(), sizeof h);
      return h;
    }
  };
  struct DigestEqual {
    bool operator()(const KeyDigest& a, const KeyDigest& b) const;  // constant time
  };
  std::vector<std::shared_ptr<const ApiKey>> keys_;
  std::unordered_map<KeyDigest, std::shared_ptr<const ApiKey>, DigestHash, DigestEqual> by_digest_;
  size_t longest_key_bytes_ = 0;
};

// The token of an `authorization: Bearer <token>` header value ("" when it is not one).
std::string_view bearerToken(std::string_view authorization);

}  // namespace prefixgate::auth
