#pragma once
// Where the Redis server is, from its URL. Pure, so config validation can check the URL without the client.
#include <cstdint>
#include <string>
#include <string_view>

namespace prefixgate::sync {

// Where the server is: redis://[[user]:password@]host[:port][/db] (port 6379 and db 0 when absent). IPv6 hosts
// in brackets; user and password may be percent-encoded (%40 for '@').
struct RedisAddress {
  std::string host;  // an IPv6 address without its brackets
  uint16_t port = 6379;
  std::string username;  // empty: AUTH with the password alone (requirepass)
  std::string password;  // empty: no AUTH
  uint32_t db = 0;
};
// Returns false with `error` saying what is wrong (for a config error message) when `url` is not such a URL.
bool parseRedisUrl(std::string_view url, RedisAddress& out, std::string& error);

}  // namespace prefixgate::sync
