#include "discovery/kubernetes/kubernetes_source.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "discovery/kubernetes/api_client.h"
#include "util/log.h"
#include "util/polled_file.h"

namespace prefixgate::discovery::kubernetes {
namespace asio = boost::asio;

namespace {
constexpr auto kListTimeout = std::chrono::seconds(30);
// The API server ends a watch after timeoutSeconds (then it is resumed); the slack covers a slow last byte.
constexpr auto kWatchTimeout = std::chrono::seconds(300);
constexpr auto kWatchSlack = std::chrono::seconds(30);
constexpr auto kBackoffInitial = std::chrono::milliseconds(500);
constexpr auto kBackoffMax = std::chrono::seconds(30);
constexpr size_t kMaxListBytes = 256u << 20;
constexpr size_t kMaxLoggedBody = 300;
constexpr const char* kSource = "kubernetes";

std::string why(const ApiResult& r) {
  if (r.status == 0 || (r.status == 200 && !r.error.empty())) return r.error;
  std::string text = "status " + std::to_string(r.status);
  if (r.status == 401) text += " (token refused; the token file is re-read before the next attempt)";
  return text + ": " + r.body.substr(0, kMaxLoggedBody);
}
}  // namespace

struct KubernetesPodSource::Loop {
  Loop(asio::io_context& io, std::string n) : ns(std::move(n)), timer(io) {}
  std::string ns;
  std::string resource_version;
  Backoff backoff{kBackoffInitial, kBackoffMax};
  asio::steady_timer timer;
};

KubernetesPodSource::KubernetesPodSource(asio::io_context& io, config::KubernetesConfig config, PodRegistry& registry,
                                         prometheus::Registry& metrics)
    : io_(io),
      config_(std::move(config)),
      registry_(registry),
      slices_(config_.namespaces.size() > 1),
      events_(prometheus::BuildCounter()
                  .Name("prefixgate_discovery_events_total")
                  .Help("Discovery events, by source and type (list, relist, added, modified, deleted, bookmark, error)")
                  .Register(metrics)),
      endpoints_(prometheus::BuildGauge()
                     .Name("prefixgate_discovery_endpoints")
                     .Help("Ready endpoints (pods) published by discovery, by source")
                     .Register(metrics)
                     .Add({{"source", kSource}})) {}

KubernetesPodSource::~KubernetesPodSource() = default;

bool KubernetesPodSource::start(std::string& error) {
  std::string url = config_.api_server;
  if (url.empty()) {
    const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
    const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port) {
      error = "discovery.kubernetes.api_server: empty (in cluster) but KUBERNETES_SERVICE_HOST/PORT are not set";
      return false;
    }
    const std::string h = host;
    url = "https://" + (h.find(':') != std::string::npos ? "[" + h + "]" : h) + ":" + port;
  }
  if (!parseApiServer(url, server_, error)) {
    error = "discovery.kubernetes.api_server: " + error;
    return false;
  }
  log::info("kubernetes: watching EndpointSlices ({}) in {} namespace(s) at {}", config_.label_selector,
            config_.namespaces.size(), url);
  for (const std::string& ns : config_.namespaces) {
    Loop& loop = loops_.emplace_back(io_, ns);
    asio::co_spawn(io_, run(loop), [ns](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        log::error("kubernetes: namespace {}: discovery stopped: {}", ns, x.what());
      }
    });
  }
  return true;
}

void KubernetesPodSource::stop() {
  asio::post(io_, [this] {
    stopped_ = true;
    for (Loop& loop : loops_) loop.timer.cancel();
  });
}

asio::awaitable<void> KubernetesPodSource::run(Loop& loop) {
  while (!stopped_) {
    if (co_await list(loop)) {
      while (!stopped_ && co_await watch(loop)) {
      }
      if (stopped_) break;
      counter("relist").Increment();
      log::info("kubernetes: namespace {}: relisting", loop.ns);
    }
    if (stopped_) break;
    boost::system::error_code ec;
    loop.timer.expires_after(loop.backoff.next());
    co_await loop.timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
}

asio::awaitable<bool> KubernetesPodSource::list(Loop& loop) {
  ApiRequest request{.target = listTarget(loop.ns, config_.label_selector),
                     .token = token(),
                     .ca_file = config_.ca_file,
                     .timeout = kListTimeout,
                     .max_body_bytes = kMaxListBytes};
  ApiResult result = co_await apiGet(server_, std::move(request));
  if (stopped_) co_return false;
  nlohmann::json body;
  if (result.status == 200 && result.error.empty()) body = nlohmann::json::parse(result.body, nullptr, false);
  const bool ok = body.is_object() && body.contains("items") && body["items"].is_array();
  if (!ok) {
    counter("error").Increment();
    log::warn("kubernetes: namespace {}: list of EndpointSlices failed, keeping the last pod set: {}", loop.ns,
              result.status == 200 && result.error.empty() ? "not an EndpointSliceList" : why(result));
    co_return false;
  }
  std::map<std::string, std::vector<PodSpec>> slices;
  for (const nlohmann::json& item : body["items"]) {
    const std::string name = item.is_object() ? metadataField(item, "name") : "";
    if (name.empty()) continue;
    std::string problem, warning;
    std::vector<PodSpec> pods = slicePods(item, config_, problem, &warning);
    if (!problem.empty()) log::warn("kubernetes: EndpointSlice {}/{} ignored: {}", loop.ns, name, problem);
    if (!warning.empty()) log::warn("kubernetes: EndpointSlice {}/{}: {}", loop.ns, name, warning);
    slices.emplace(name, std::move(pods));
  }
  loop.resource_version = metadataField(body, "resourceVersion");
  slices_.replace(loop.ns, std::move(slices));
  counter("list").Increment();
  log::info("kubernetes: namespace {}: listed {} EndpointSlices (resourceVersion {})", loop.ns,
            body["items"].size(), loop.resource_version);
  publish();
  co_return true;
}

asio::awaitable<bool> KubernetesPodSource::watch(Loop& loop) {
  bool relist = false;
  LineSink sink = [&](std::string_view line) {
    WatchEvent event;
    std::string error;
    if (!parseWatchLine(line, event, error)) {
      counter("error").Increment();
      log::warn("kubernetes: namespace {}: bad watch line ({}): relisting", loop.ns, error);
      relist = true;
    } else {
      relist = !apply(loop, event);
    }
    return !relist && !stopped_;
  };
  log::info("kubernetes: namespace {}: watching from resourceVersion {}", loop.ns, loop.resource_version);
  ApiRequest request{.target = watchTarget(loop.ns, config_.label_selector, loop.resource_version, kWatchTimeout),
                     .token = token(),
                     .ca_file = config_.ca_file,
                     .timeout = kWatchTimeout + kWatchSlack,
                     .on_line = std::move(sink)};
  ApiResult result = co_await apiGet(server_, std::move(request));
  if (stopped_ || relist) co_return false;
  if (result.status != 200 || !result.error.empty()) {
    counter("error").Increment();
    log::warn("kubernetes: namespace {}: watch broke, keeping the pod set until a relist: {}", loop.ns, why(result));
    co_return false;
  }
  loop.backoff.reset();
  log::info("kubernetes: namespace {}: watch ended at resourceVersion {}; resuming", loop.ns, loop.resource_version);
  co_return true;
}

bool KubernetesPodSource::apply(Loop& loop, WatchEvent& event) {
  using Type = WatchEvent::Type;
  if (event.type == Type::kError) {
    counter("error").Increment();
    if (event.error_code == 410)
      log::info("kubernetes: namespace {}: resourceVersion {} is gone (410): relisting", loop.ns, loop.resource_version);
    else
      log::warn("kubernetes: namespace {}: watch error {} {}: relisting", loop.ns, event.error_code,
                event.error_message);
    return false;
  }
  loop.resource_version = event.resource_version.empty() ? loop.resource_version : event.resource_version;
  loop.backoff.reset();
  if (event.type == Type::kBookmark) {
    counter("bookmark").Increment();
    return true;
  }
  static constexpr const char* kNames[] = {"added", "modified", "deleted"};  // by Type: kAdded, kModified, kDeleted
  counter(kNames[static_cast<int>(event.type)]).Increment();
  log::info("kubernetes: namespace {}: EndpointSlice {} {}", loop.ns, event.name, kNames[static_cast<int>(event.type)]);
  if (event.type == Type::kDeleted) {
    slices_.erase(loop.ns, event.name);
  } else {
    std::string problem, warning;
    std::vector<PodSpec> pods = slicePods(event.object, config_, problem, &warning);
    if (!problem.empty()) log::warn("kubernetes: EndpointSlice {}/{} ignored: {}", loop.ns, event.name, problem);
    if (!warning.empty()) log::warn("kubernetes: EndpointSlice {}/{}: {}", loop.ns, event.name, warning);
    slices_.put(loop.ns, event.name, std::move(pods));
  }
  publish();
  return true;
}

// Re-read before every list and watch, so a rotated service-account token is picked up (and a refused one retried).
std::string KubernetesPodSource::token() const {
  std::string text;
  if (!util::readFileText(config_.token_file, text)) {
    if (server_.tls) log::warn("kubernetes: cannot read token_file {}: sending no token", config_.token_file);
    return "";
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

void KubernetesPodSource::publish() {
  std::vector<PodSpec> pods = slices_.pods();
  endpoints_.Set(static_cast<double>(pods.size()));
  if (published_once_ && pods == published_) return;
  published_once_ = true;
  published_ = pods;
  log::info("kubernetes: pod set now {} ready pods", pods.size());
  registry_.update(std::move(pods));
}

prometheus::Counter& KubernetesPodSource::counter(const std::string& type) {
  return events_.Add({{"source", kSource}, {"type", type}});
}

}  // namespace prefixgate::discovery::kubernetes
