#pragma once
// Kubernetes discovery: lists then watches the EndpointSlices of each configured namespace on the control thread's
// io_context and publishes the merged ready pods to the registry, the same path as the pods file, so requests in
// flight to a pod that leaves finish on it. An API server that fails (down, refusing the token, a bad certificate)
// never empties the pod set: the last one stays until a list succeeds again.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "discovery/kubernetes/endpoint_slices.h"
#include "discovery/kubernetes/watch_protocol.h"
#include "discovery/pod_set.h"

namespace prefixgate::discovery::kubernetes {

class KubernetesPodSource {
 public:
  KubernetesPodSource(boost::asio::io_context& io, config::KubernetesConfig config, PodRegistry& registry,
                      prometheus::Registry& metrics);
  ~KubernetesPodSource();
  // Resolves the API server (KUBERNETES_SERVICE_HOST/PORT when api_server is empty) and starts one list-and-watch
  // loop per namespace. False with `error` when the server cannot be named. Call before the io_context runs.
  bool start(std::string& error);
  // Ends the loops at their next step (the control thread's io_context stopping ends the rest). Any thread.
  void stop();
  const ApiServer& server() const { return server_; }

 private:
  struct Loop;
  boost::asio::awaitable<void> run(Loop& loop);
  boost::asio::awaitable<bool> list(Loop& loop);
  // Watches from loop.resource_version until the stream ends; true when it ended normally (resume the watch),
  // false when it broke or the resource version is gone (relist).
  boost::asio::awaitable<bool> watch(Loop& loop);
  bool apply(Loop& loop, WatchEvent& event);
  std::string token() const;
  void publish();
  prometheus::Counter& counter(const std::string& type);  // prefixgate_discovery_events_total{type}

  boost::asio::io_context& io_;
  config::KubernetesConfig config_;
  PodRegistry& registry_;
  ApiServer server_;
  SliceSet slices_;
  std::vector<PodSpec> published_;
  bool published_once_ = false;
  std::list<Loop> loops_;  // stable addresses: each coroutine holds its own
  bool stopped_ = false;
  prometheus::Family<prometheus::Counter>& events_;
  prometheus::Gauge& endpoints_;
};

}  // namespace prefixgate::discovery::kubernetes
