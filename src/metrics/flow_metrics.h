#pragma once
// The prefixgate_flow_* series of flow control (docs/flow-control.md): requests queued now, dispatched from the
// queue with their wait, and shed, per priority class; dispatches and sheds also per tenant, labelled only with
// API key names (a tenant named by a header or the body's `user` is "-"), so the series stay bounded by the
// keys file and the configured classes. Thread-safe (prometheus families lock internally).
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>
#include <string_view>

namespace prefixgate::metrics {

class FlowMetrics {
 public:
  explicit FlowMetrics(prometheus::Registry& registry);
  // A request of class `cls` entered (+1) or left (-1) the queue.
  void queued(const std::string& cls, int delta);
  // A queued request was dispatched after `wait_seconds`.
  void dispatched(const std::string& cls, const std::string& tenant_label, double wait_seconds);
  // A request was shed: `reason` tenant_queue_full, queue_full, timeout, objective or client_gone.
  void shed(std::string_view reason, const std::string& cls, const std::string& tenant_label);

 private:
  prometheus::Family<prometheus::Gauge>& queued_;
  prometheus::Family<prometheus::Counter>& dispatched_;
  prometheus::Family<prometheus::Histogram>& wait_;
  prometheus::Family<prometheus::Counter>& shed_;
};

}  // namespace prefixgate::metrics
