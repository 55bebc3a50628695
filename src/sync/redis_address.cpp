#include "sync/redis_address.h"

#include <charconv>
#include <limits>

namespace prefixgate::sync {

namespace {

constexpr std::string_view kScheme = "redis://";

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes %XX escapes (RFC 3986), so a password may hold '@', ':' or '/'.
bool percentDecode(std::string_view in, std::string& out, std::string& error, const char* what) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    const int hi = i + 2 < in.size() ? hexValue(in[i + 1]) : -1;
    const int lo = hi >= 0 ? hexValue(in[i + 2]) : -1;
    if (lo < 0) {
      error = std::string("bad percent escape in the ") + what + " (write %XX with two hex digits, e.g. %40 for '@')";
      return false;
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return true;
}

// Digits only (no sign, no spaces), within [min, max].
bool parseNumber(std::string_view text, uint64_t min, uint64_t max, uint64_t& value) {
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string_view::npos) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && value >= min && value <= max;
}

bool parseUserInfo(std::string_view info, RedisAddress& out, std::string& error) {
  const size_t colon = info.find(':');
  if (colon == std::string_view::npos) {
    error = "user info without ':' (write redis://:password@host for a password alone, redis://user:password@host "
            "with a user)";
    return false;
  }
  if (!percentDecode(info.substr(0, colon), out.username, error, "user name") ||
      !percentDecode(info.substr(colon + 1), out.password, error, "password"))
    return false;
  if (out.password.empty()) {
    error = "an empty password after ':'";
    return false;
  }
  return true;
}

// host, [v6], host:port or [v6]:port.
bool parseHostPort(std::string_view text, RedisAddress& out, std::string& error) {
  std::string_view host = text, port;
  if (text.starts_with('[')) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      error = "an IPv6 address without its closing ']'";
      return false;
    }
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty() && !rest.starts_with(':')) {
      error = "unexpected text after ']': '" + std::string(rest) + "'";
      return false;
    }
    if (!rest.empty()) port = rest.substr(1);
  } else if (const size_t colon = text.find(':'); colon != std::string_view::npos) {
    if (text.find(':', colon + 1) != std::string_view::npos) {
      error = "an IPv6 address must be in brackets: redis://[" + std::string(text) + "]";
      return false;
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) {
    error = "no host";
    return false;
  }
  out.host = std::string(host);
  if (text.ends_with(':') || !port.empty()) {
    uint64_t value = 0;
    if (!parseNumber(port, 1, std::numeric_limits<uint16_t>::max(), value)) {
      error = "bad port '" + std::string(port) + "' (1 to 65535)";
      return false;
    }
    out.port = static_cast<uint16_t>(value);
  }
  return true;
}

}  // namespace

bool parseRedisUrl(std::string_view url, RedisAddress& out, std::string& error) {
  if (!url.starts_with(kScheme)) {
    error = url.starts_with("rediss://") ? "rediss:// (TLS) is not supported: use redis://"
                                         : "not a redis:// URL (redis://[[user]:password@]host[:port][/db])";
    return false;
  }
  RedisAddress address;
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  // The last '@' ends the user info: an unescaped '@' in a password still parses.
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    if (!parseUserInfo(authority.substr(0, at), address, error)) return false;
    authority = authority.substr(at + 1);
  }
  if (!parseHostPort(authority, address, error)) return false;
  if (slash != std::string_view::npos && slash + 1 < rest.size()) {
    const std::string_view db = rest.substr(slash + 1);
    uint64_t value = 0;
    if (!parseNumber(db, 0, std::numeric_limits<uint32_t>::max(), value)) {
      error = "bad db number '" + std::string(db) + "' (digits only, after the last '/')";
      return false;
    }
    address.db = static_cast<uint32_t>(value);
  }
  out = std::move(address);
  return true;
}

}  // namespace prefixgate::sync
