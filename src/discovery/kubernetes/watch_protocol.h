#pragma once
// The Kubernetes API as the EndpointSlice watch speaks it: the API server URL, the list and watch request targets,
// one line of a watch stream, and the back-off between relists. Pure: no sockets, no clocks.
#include <nlohmann/json.hpp>

#include <chrono>
#include <string>
#include <string_view>

namespace prefixgate::discovery::kubernetes {

struct ApiServer {
  bool tls = true;
  std::string host;  // without brackets
  uint16_t port = 0;
};

// "https://HOST[:PORT]" or "http://HOST[:PORT]" (default ports 443 and 80; IPv6 hosts in brackets); a path, query
// or user part is refused. False with `error` saying what is wrong.
bool parseApiServer(std::string_view url, ApiServer& out, std::string& error);

// Percent-encodes a query value (label selectors hold '/', '=', ',' and '!').
std::string queryEscape(std::string_view value);

// GET targets for the slices of `ns` selected by `selector` (empty = every slice).
std::string listTarget(const std::string& ns, const std::string& selector);
std::string watchTarget(const std::string& ns, const std::string& selector, const std::string& resource_version,
                        std::chrono::seconds timeout);

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kAdded;
  nlohmann::json object;         // the EndpointSlice, or the Status of an ERROR
  std::string resource_version;  // object.metadata.resourceVersion ("" for an ERROR)
  std::string name;              // object.metadata.name
  int error_code = 0;            // an ERROR's Status code (410 = the resource version is gone: relist)
  std::string error_message;     // and its message
};

// One line of a watch stream: {"type": ..., "object": {...}}. False with `error` when it is not one.
bool parseWatchLine(std::string_view line, WatchEvent& out, std::string& error);

// Doubling delays between failed attempts, from `initial` up to `max`; reset() after a success.
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max) : initial_(initial), max_(max) {}
  std::chrono::milliseconds next();
  void reset() { next_ = std::chrono::milliseconds(0); }

 private:
  std::chrono::milliseconds initial_;
  std::chrono::milliseconds max_;
  std::chrono::milliseconds next_{0};
};

}  // namespace prefixgate::discovery::kubernetes
