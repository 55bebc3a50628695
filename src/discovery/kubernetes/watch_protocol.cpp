#include "discovery/kubernetes/watch_protocol.h"

#include <algorithm>
#include <cctype>

#include "discovery/kubernetes/endpoint_slices.h"
#include "net/listener.h"

namespace prefixgate::discovery::kubernetes {
namespace {

constexpr std::string_view kSlicesApi = "/apis/discovery.k8s.io/v1/namespaces/";

bool startsWith(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

}  // namespace

bool parseApiServer(std::string_view url, ApiServer& out, std::string& error) {
  if (startsWith(url, "https://")) {
    out.tls = true;
    url.remove_prefix(8);
  } else if (startsWith(url, "http://")) {
    out.tls = false;
    url.remove_prefix(7);
  } else {
    error = "expected an http:// or https:// URL, got '" + std::string(url) + "'";
    return false;
  }
  if (!url.empty() && url.back() == '/') url.remove_suffix(1);
  if (url.empty() || url.find_first_of("/?#@") != std::string_view::npos) {
    error = "expected SCHEME://HOST[:PORT] without a path, got '" + std::string(url) + "'";
    return false;
  }
  const size_t bracket = url.rfind(']');
  const size_t colon = url.rfind(':');
  const bool has_port = colon != std::string_view::npos && (bracket == std::string_view::npos || colon > bracket) &&
                        (url.front() == '[' || url.find(':') == colon);
  std::string host_port = has_port ? std::string(url) : std::string(url) + (out.tls ? ":443" : ":80");
  if (!net::splitHostPort(host_port, out.host, out.port) || out.port == 0) {
    error = "bad host or port in '" + std::string(url) + "'";
    return false;
  }
  return true;
}

std::string queryEscape(std::string_view value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string listTarget(const std::string& ns, const std::string& selector) {
  std::string target = std::string(kSlicesApi) + queryEscape(ns) + "/endpointslices";
  if (!selector.empty()) target += "?labelSelector=" + queryEscape(selector);
  return target;
}

std::string watchTarget(const std::string& ns, const std::string& selector, const std::string& resource_version,
                        std::chrono::seconds timeout) {
  std::string target = listTarget(ns, selector);
  target += selector.empty() ? '?' : '&';
  target += "resourceVersion=" + queryEscape(resource_version) +
            "&allowWatchBookmarks=true&watch=1&timeoutSeconds=" + std::to_string(timeout.count());
  return target;
}

bool parseWatchLine(std::string_view line, WatchEvent& out, std::string& error) {
  nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
  if (event.is_discarded() || !event.is_object()) {
    error = "not a JSON object";
    return false;
  }
  auto type = event.find("type");
  auto object = event.find("object");
  if (type == event.end() || !type->is_string() || object == event.end() || !object->is_object()) {
    error = "expected {\"type\": ..., \"object\": {...}}";
    return false;
  }
  const std::string name = type->get<std::string>();
  if (name == "ADDED") out.type = WatchEvent::Type::kAdded;
  else if (name == "MODIFIED") out.type = WatchEvent::Type::kModified;
  else if (name == "DELETED") out.type = WatchEvent::Type::kDeleted;
  else if (name == "BOOKMARK") out.type = WatchEvent::Type::kBookmark;
  else if (name == "ERROR") out.type = WatchEvent::Type::kError;
  else {
    error = "unknown event type '" + name + "'";
    return false;
  }
  out.object = std::move(*object);
  out.resource_version.clear();
  out.name.clear();
  out.error_code = 0;
  out.error_message.clear();
  if (out.type == WatchEvent::Type::kError) {
    auto code = out.object.find("code");
    if (code != out.object.end() && code->is_number_integer()) out.error_code = code->get<int>();
    auto message = out.object.find("message");
    if (message != out.object.end() && message->is_string()) out.error_message = message->get<std::string>();
    return true;
  }
  out.resource_version = metadataField(out.object, "resourceVersion");
  out.name = metadataField(out.object, "name");
  if (out.type != WatchEvent::Type::kBookmark && out.name.empty()) {
    error = "object without metadata.name";
    return false;
  }
  return true;
}

std::chrono::milliseconds Backoff::next() {
  next_ = next_.count() == 0 ? initial_ : std::min(next_ * 2, max_);
  return next_;
}

}  // namespace prefixgate::discovery::kubernetes
