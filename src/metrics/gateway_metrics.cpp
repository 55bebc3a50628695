#include "metrics/gateway_metrics.h"

#include <prometheus/text_serializer.h>

#include <mutex>

namespace prefixgate::metrics {
namespace {

const prometheus::Histogram::BucketBoundaries& latencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                   0.5,   1,      2.5,   5,    10,    30,   60,  120, 300, 600};
  return kBuckets;
}

}  // namespace

GatewayMetrics::GatewayMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("prefixgate_requests_total")
                    .Help("Client requests finished, by model, pod, HTTP status and routing strategy")
                    .Register(*registry_)),
      duration_(prometheus::BuildHistogram()
                    .Name("prefixgate_request_duration_seconds")
                    .Help("Time from the request head to the last response byte, by model, pod and HTTP status")
                    .Register(*registry_)),
      first_byte_(prometheus::BuildHistogram()
                      .Name("prefixgate_time_to_first_byte_seconds")
                      .Help("Time from the request head to the first response byte from the engine, by model")
                      .Register(*registry_)),
      upstream_errors_(prometheus::BuildCounter()
                           .Name("prefixgate_upstream_errors_total")
                           .Help("Failures talking to engine pods, by pod and reason")
                           .Register(*registry_)),
      retries_(prometheus::BuildCounter()
                   .Name("prefixgate_retries_total")
                   .Help("Requests sent again (fresh connection or another pod) before any response byte, by reason")
                   .Register(*registry_)),
      pods_(prometheus::BuildGauge().Name("prefixgate_pods").Help("Pods known to the gateway, by state").Register(*registry_)),
      pod_in_flight_(prometheus::BuildGauge()
                         .Name("prefixgate_pod_in_flight_requests")
                         .Help("Requests in flight from this gateway, by pod")
                         .Register(*registry_)),
      pod_ready_(prometheus::BuildGauge()
                     .Name("prefixgate_pod_ready")
                     .Help("1 when the pod is ready to take requests, else 0")
                     .Register(*registry_)) {}

GatewayMetrics::RequestSeries& GatewayMetrics::requestSeries(const std::string& model, const std::string& pod, int status,
                                                             const std::string& strategy) {
  // Looking a series up through prometheus-cpp builds label maps under its lock; this cache makes the common
  // case one shared-lock hash lookup.
  std::string key = model;
  key.append(1, '\0').append(pod).append(1, '\0').append(std::to_string(status)).append(1, '\0').append(strategy);
  {
    std::shared_lock lock(series_mutex_);
    if (auto it = series_.find(key); it != series_.end()) return it->second;
  }
  std::unique_lock lock(series_mutex_);
  auto [it, inserted] = series_.try_emplace(std::move(key));
  if (inserted) {
    const std::string code = std::to_string(status);
    it->second.count = &requests_.Add({{"model", model}, {"pod", pod}, {"status", code}, {"strategy", strategy}});
    it->second.duration = &duration_.Add({{"model", model}, {"pod", pod}, {"status", code}}, latencyBuckets());
  }
  return it->second;
}

void GatewayMetrics::requestDone(const std::string& model, const std::string& pod, int status,
                                 const std::string& strategy, double seconds) {
  RequestSeries& series = requestSeries(model, pod, status, strategy);
  series.count->Increment();
  series.duration->Observe(seconds);
}

void GatewayMetrics::firstByte(const std::string& model, double seconds) {
  prometheus::Histogram* histogram = nullptr;
  {
    std::shared_lock lock(series_mutex_);
    if (auto it = first_byte_series_.find(model); it != first_byte_series_.end()) histogram = it->second;
  }
  if (!histogram) {
    std::unique_lock lock(series_mutex_);
    auto& slot = first_byte_series_[model];
    if (!slot) slot = &first_byte_.Add({{"model", model}}, latencyBuckets());
    histogram = slot;
  }
  histogram->Observe(seconds);
}

void GatewayMetrics::upstreamError(const std::string& pod, const std::string& reason) {
  upstream_errors_.Add({{"pod", pod}, {"reason", reason}}).Increment();
}

void GatewayMetrics::retried(const std::string& reason) { retries_.Add({{"reason", reason}}).Increment(); }

std::string GatewayMetrics::serialize(const discovery::PodSet& pods, int64_t now_ms) {
  // Pod gauges mirror the current snapshot: series of pods that left are dropped.
  static std::mutex serialize_mutex;
  std::lock_guard lock(serialize_mutex);
  for (auto* family : {&pod_in_flight_, &pod_ready_}) {
    for (const auto& metric : family->Collect())
      for (const auto& m : metric.metric) {
        std::map<std::string, std::string> labels;
        for (const auto& l : m.label) labels[l.name] = l.value;
        if (!pods.find(labels["pod"])) family->Remove(&family->Add(labels));
      }
  }
  double ready = 0, not_ready = 0;
  for (const discovery::PodPtr& pod : pods.pods()) {
    bool r = pod->ready(now_ms);
    (r ? ready : not_ready) += 1;
    pod_in_flight_.Add({{"pod", pod->name()}}).Set(pod->inFlight());
    pod_ready_.Add({{"pod", pod->name()}}).Set(r ? 1 : 0);
  }
  pods_.Add({{"state", "ready"}}).Set(ready);
  pods_.Add({{"state", "not_ready"}}).Set(not_ready);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace prefixgate::metrics
