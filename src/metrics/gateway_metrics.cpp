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

// (predicted - engine) / prompt tokens lies in -1..1: negative = under-predicted, positive = over-predicted; the
// fine buckets near 0 separate block rounding (a few percent) from real drift.
const prometheus::Histogram::BucketBoundaries& predictionErrorBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {-1,   -0.75, -0.5, -0.25, -0.1, -0.05, -0.02, 0,
                                                                   0.02, 0.05,  0.1,  0.25,  0.5,  0.75,  1};
  return kBuckets;
}

// From a cache hit (about a microsecond) to the slowest /tokenize answer a timeout allows.
const prometheus::Histogram::BucketBoundaries& remoteTokenizerBuckets() {
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.000005, 0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
      2.5,      5};
  return kBuckets;
}

constexpr std::string_view kRemoteTokenizerOutcomes[] = {"hit", "miss", "error", "timeout", "no_pod"};

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
                     .Register(*registry_)),
      prediction_responses_(prometheus::BuildCounter()
                                .Name("prefixgate_prefix_prediction_audited_responses_total")
                                .Help("Responses whose engine-reported cached tokens were compared with the prefix "
                                      "strategy's prediction, by pod")
                                .Register(*registry_)),
      predicted_tokens_(prometheus::BuildCounter()
                            .Name("prefixgate_prefix_predicted_tokens_total")
                            .Help("Prompt tokens the router predicted as cached on the chosen pod, over audited "
                                  "responses, by pod")
                            .Register(*registry_)),
      engine_cached_tokens_(prometheus::BuildCounter()
                                .Name("prefixgate_prefix_engine_cached_tokens_total")
                                .Help("Prompt tokens the engine reported as cached "
                                      "(usage.prompt_tokens_details.cached_tokens), over audited responses, by pod")
                                .Register(*registry_)),
      prediction_error_(prometheus::BuildHistogram()
                            .Name("prefixgate_prefix_prediction_error_ratio")
                            .Help("(predicted - engine-reported cached tokens) / prompt tokens per audited "
                                  "response, by pod: > 0 over-predicted, < 0 under-predicted")
                            .Register(*registry_)) {
  auto& requests = prometheus::BuildCounter()
                       .Name("prefixgate_remote_tokenizer_requests_total")
                       .Help("Requests whose prompt tokens were asked of the remote tokenizer (engine /tokenize), by "
                             "outcome: hit (cache), miss (an engine answered), error, timeout, no_pod")
                       .Register(*registry_);
  for (std::string_view outcome : kRemoteTokenizerOutcomes)
    remote_tokenizer_requests_.emplace_back(outcome, &requests.Add({{"outcome", std::string(outcome)}}));
  remote_tokenizer_seconds_ = &prometheus::BuildHistogram()
                                   .Name("prefixgate_remote_tokenizer_seconds")
                                   .Help("Time a request spent getting its prompt tokens from the remote tokenizer "
                                         "(cache hits included)")
                                   .Register(*registry_)
                                   .Add({}, remoteTokenizerBuckets());
}

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

void GatewayMetrics::remoteTokenizer(std::string_view outcome, double seconds) {
  for (auto& [name, counter] : remote_tokenizer_requests_)
    if (name == outcome) counter->Increment();
  remote_tokenizer_seconds_->Observe(seconds);
}

GatewayMetrics::PredictionSeries& GatewayMetrics::predictionSeries(const std::string& pod) {
  // Cached like the request series; kept when the pod leaves, as its prefixgate_requests_total series are (a
  // counter that vanished would read as a reset).
  {
    std::shared_lock lock(series_mutex_);
    if (auto it = prediction_series_.find(pod); it != prediction_series_.end()) return it->second;
  }
  std::unique_lock lock(series_mutex_);
  auto [it, inserted] = prediction_series_.try_emplace(pod);
  if (inserted) {
    it->second.responses = &prediction_responses_.Add({{"pod", pod}});
    it->second.predicted = &predicted_tokens_.Add({{"pod", pod}});
    it->second.engine_cached = &engine_cached_tokens_.Add({{"pod", pod}});
    it->second.error_ratio = &prediction_error_.Add({{"pod", pod}}, predictionErrorBuckets());
  }
  return it->second;
}

void GatewayMetrics::predictionAudited(const std::string& pod, uint64_t predicted_tokens,
                                       uint64_t engine_cached_tokens, double error_ratio) {
  PredictionSeries& series = predictionSeries(pod);
  series.responses->Increment();
  series.predicted->Increment(static_cast<double>(predicted_tokens));
  series.engine_cached->Increment(static_cast<double>(engine_cached_tokens));
  series.error_ratio->Observe(error_ratio);
}

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
