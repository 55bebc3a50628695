#include "metrics/flow_metrics.h"

namespace prefixgate::metrics {

FlowMetrics::FlowMetrics(prometheus::Registry& registry)
    : queued_(prometheus::BuildGauge()
                  .Name("prefixgate_flow_queued")
                  .Help("Requests waiting in the gateway's flow-control queue now, by priority class")
                  .Register(registry)),
      dispatched_(prometheus::BuildCounter()
                      .Name("prefixgate_flow_dispatched_total")
                      .Help("Requests dispatched from the flow-control queue to a pod, by priority class and tenant "
                            "(API key names; \"-\" for tenants named by a header or the body's user)")
                      .Register(registry)),
      wait_(prometheus::BuildHistogram()
                .Name("prefixgate_flow_queue_wait_seconds")
                .Help("Time a dispatched request waited in the flow-control queue, by priority class")
                .Register(registry)),
      shed_(prometheus::BuildCounter()
                .Name("prefixgate_flow_shed_total")
                .Help("Requests flow control refused instead of queueing or dispatching, by reason "
                      "(tenant_queue_full 429, queue_full 503, timeout 503, objective 503: waited past its TTFT "
                      "objective, client_gone: left while queued), priority class and tenant (as dispatched)")
                .Register(registry)) {}

void FlowMetrics::queued(const std::string& cls, int delta) { queued_.Add({{"class", cls}}).Increment(delta); }

void FlowMetrics::dispatched(const std::string& cls, const std::string& tenant_label, double wait_seconds) {
  dispatched_.Add({{"class", cls}, {"tenant", tenant_label}}).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                 0.5,   1,     2.5,  5,     10,   30,  60};
  wait_.Add({{"class", cls}}, kBuckets).Observe(wait_seconds);
}

void FlowMetrics::shed(std::string_view reason, const std::string& cls, const std::string& tenant_label) {
  shed_.Add({{"reason", std::string(reason)}, {"class", cls}, {"tenant", tenant_label}}).Increment();
}

}  // namespace prefixgate::metrics
