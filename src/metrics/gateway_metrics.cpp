#include "metrics/gateway_metrics.h"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

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

constexpr std::string_view kRemoteTokenizerOutcomes[] = {"hit",    "miss",        "error",       "timeout",
                                                          "no_pod", "unsupported", "breaker_open"};

constexpr const char* kRequestsHelp = "Client requests finished, by model, pod, HTTP status and routing strategy";
constexpr const char* kDurationHelp =
    "Time from the request head to the last response byte, by model, pod and HTTP status";
constexpr const char* kFirstByteHelp =
    "Time from the request head to the first response byte from the engine, by model";

std::atomic<uint64_t> next_instance{1};

// A shard's numbers have one writer (its thread): a relaxed load and store, no locked read-modify-write; the
// scraper reads them relaxed (a number can lag by the requests in progress, never tear).
template <class T>
void add(std::atomic<T>& n, T v) {
  n.store(n.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

// One thread's histogram: a count per bucket (Prometheus's le: the first bound >= the value; the last is +Inf).
struct LocalHistogram {
  std::vector<std::atomic<uint64_t>> buckets = std::vector<std::atomic<uint64_t>>(latencyBuckets().size() + 1);
  std::atomic<double> sum{0};
  void observe(double value) {
    const auto& bounds = latencyBuckets();
    const size_t i = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
    add<uint64_t>(buckets[i], 1);
    add<double>(sum, value);
  }
};

// Adds `from` into the Prometheus histogram `to` (cumulative buckets, as the text format wants them).
void mergeHistogram(const LocalHistogram& from, prometheus::ClientMetric::Histogram& to) {
  const auto& bounds = latencyBuckets();
  if (to.bucket.empty()) {
    to.bucket.resize(bounds.size() + 1);
    for (size_t i = 0; i <= bounds.size(); ++i)
      to.bucket[i].upper_bound = i < bounds.size() ? bounds[i] : std::numeric_limits<double>::infinity();
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i < from.buckets.size(); ++i) {
    cumulative += from.buckets[i].load(std::memory_order_relaxed);
    to.bucket[i].cumulative_count += cumulative;
  }
  to.sample_count += cumulative;
  to.sample_sum += from.sum.load(std::memory_order_relaxed);
}

}  // namespace

class GatewayMetrics::Shard {
 public:
  struct RequestSeries {
    std::string model, pod, status, strategy;
    std::atomic<uint64_t> count{0};
    LocalHistogram duration;
  };
  const std::thread::id thread = std::this_thread::get_id();
  // The owner thread finds without the lock (only it inserts); inserts and the scraper's reads hold it.
  std::mutex mutex;
  std::unordered_map<std::string, RequestSeries> requests;  // by model, pod, status, strategy
  std::unordered_map<std::string, LocalHistogram> first_byte;  // by model
  std::string key;  // the owner's lookup key, reused

  RequestSeries& requestSeries(const std::string& model, const std::string& pod, int status,
                               const std::string& strategy) {
    char digits[16];
    const std::string_view code(digits, std::to_chars(digits, digits + sizeof digits, status).ptr);
    key.clear();
    key.append(model).append(1, '\0').append(pod).append(1, '\0').append(code).append(1, '\0').append(strategy);
    if (auto it = requests.find(key); it != requests.end()) return it->second;
    std::lock_guard lock(mutex);
    RequestSeries& series = requests.try_emplace(key).first->second;
    series.model = model;
    series.pod = pod;
    series.status = code;
    series.strategy = strategy;
    return series;
  }

  LocalHistogram& firstByte(const std::string& model) {
    if (auto it = first_byte.find(model); it != first_byte.end()) return it->second;
    std::lock_guard lock(mutex);
    return first_byte.try_emplace(model).first->second;
  }
};

GatewayMetrics::~GatewayMetrics() = default;

GatewayMetrics::Shard& GatewayMetrics::shard() {
  // Each thread remembers its shard of the last GatewayMetrics it recorded into (the gateway has one).
  thread_local uint64_t cached_instance = 0;
  thread_local Shard* cached_shard = nullptr;
  if (cached_instance == instance_) return *cached_shard;
  std::lock_guard lock(shards_mutex_);
  auto it = std::find_if(shards_.begin(), shards_.end(),
                         [](const auto& s) { return s->thread == std::this_thread::get_id(); });
  cached_shard = it != shards_.end() ? it->get() : shards_.emplace_back(std::make_unique<Shard>()).get();
  cached_instance = instance_;
  return *cached_shard;
}

std::vector<prometheus::MetricFamily> GatewayMetrics::mergeShards() {
  // Series of several threads with the same labels become one; the maps keep the text's order stable.
  std::map<std::string, prometheus::ClientMetric> requests, durations, first_bytes;
  std::lock_guard lock(shards_mutex_);
  for (const auto& shard : shards_) {
    std::lock_guard shard_lock(shard->mutex);
    for (const auto& [key, series] : shard->requests) {
      auto& count = requests[key];
      if (count.label.empty())
        count.label = {{"model", series.model}, {"pod", series.pod}, {"status", series.status},
                       {"strategy", series.strategy}};
      count.counter.value += static_cast<double>(series.count.load(std::memory_order_relaxed));
      auto& duration = durations[series.model + '\0' + series.pod + '\0' + series.status];
      if (duration.label.empty())
        duration.label = {{"model", series.model}, {"pod", series.pod}, {"status", series.status}};
      mergeHistogram(series.duration, duration.histogram);
    }
    for (const auto& [model, histogram] : shard->first_byte) {
      auto& first_byte = first_bytes[model];
      if (first_byte.label.empty()) first_byte.label = {{"model", model}};
      mergeHistogram(histogram, first_byte.histogram);
    }
  }
  auto family = [](const char* name, const char* help, prometheus::MetricType type,
                   std::map<std::string, prometheus::ClientMetric>& series) {
    prometheus::MetricFamily f{name, help, type, {}};
    for (auto& [key, metric] : series) f.metric.push_back(std::move(metric));
    return f;
  };
  std::vector<prometheus::MetricFamily> families;
  families.push_back(family("prefixgate_requests_total", kRequestsHelp, prometheus::MetricType::Counter, requests));
  families.push_back(
      family("prefixgate_request_duration_seconds", kDurationHelp, prometheus::MetricType::Histogram, durations));
  families.push_back(
      family("prefixgate_time_to_first_byte_seconds", kFirstByteHelp, prometheus::MetricType::Histogram, first_bytes));
  return families;
}

GatewayMetrics::GatewayMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      instance_(next_instance.fetch_add(1, std::memory_order_relaxed)),
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
      engine_scrape_errors_(prometheus::BuildCounter()
                                .Name("prefixgate_engine_scrape_errors_total")
                                .Help("Engine metrics scrapes that gave no load, by pod and reason: unreachable, "
                                      "status (not 200), unknown_series (no series of the pod's engine dialect: its "
                                      "load is unknown), props (llama.cpp's /props: its KV capacity is unknown)")
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
                             "outcome: hit (cache), miss (an engine answered), error, timeout, no_pod, unsupported "
                             "(no ready pod's engine can tokenize it, e.g. a chat request on SGLang), breaker_open "
                             "(every pod that can was skipped after failing)")
                       .Register(*registry_);
  for (std::string_view outcome : kRemoteTokenizerOutcomes)
    remote_tokenizer_requests_.emplace_back(outcome, &requests.Add({{"outcome", std::string(outcome)}}));
  remote_tokenizer_seconds_ = &prometheus::BuildHistogram()
                                   .Name("prefixgate_remote_tokenizer_seconds")
                                   .Help("Time a request spent getting its prompt tokens from the remote tokenizer "
                                         "(cache hits included)")
                                   .Register(*registry_)
                                   .Add({}, remoteTokenizerBuckets());
  auto& pd = prometheus::BuildCounter()
                 .Name("prefixgate_pd_requests_total")
                 .Help("Requests of disaggregated models (prefill pods and decode pods), by outcome: disaggregated "
                       "(prefilled on one pod, decoded on another), no_transfer_params (the prefill answer carried "
                       "none: decoded aggregated on the decode pod), prefill_failed (no prefill pod answered), "
                       "sidecar (sent once to the decode pod's routing sidecar), aggregated (short or mostly cached: "
                       "disaggregation.aggregate_below_tokens), prefill_busy (every prefill pod busy: served whole by "
                       "a decode pod, disaggregation.max_prefill_in_flight)")
                 .Register(*registry_);
  for (std::string_view outcome : kPdOutcomes) pd_requests_.emplace_back(outcome, &pd.Add({{"outcome", std::string(outcome)}}));
  const prometheus::Histogram::BucketBoundaries leg_buckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  pd_prefill_seconds_ = &prometheus::BuildHistogram()
                             .Name("prefixgate_pd_prefill_seconds")
                             .Help("A disaggregated request's prefill leg: from sending it to its whole answer")
                             .Register(*registry_)
                             .Add({}, leg_buckets);
  pd_handoff_seconds_ = &prometheus::BuildHistogram()
                             .Name("prefixgate_pd_handoff_seconds")
                             .Help("A disaggregated request's KV hand-off: from its prefill leg's answer to the decode "
                                   "leg's response head (the decode pod pulls the KV, then starts)")
                             .Register(*registry_)
                             .Add({}, leg_buckets);
  auto& slot_waits = prometheus::BuildCounter()
                         .Name("prefixgate_slot_waits_total")
                         .Help("Requests that waited at the gateway for a slot engine's busy slot holding their "
                               "prefix (routing.prefix_cache.slot_wait_ms), by outcome: turn (the slot freed for "
                               "it), timeout (sent after slot_wait_ms without its turn), client_gone (the client "
                               "hung up while it waited: never sent)")
                         .Register(*registry_);
  for (std::string_view outcome : kSlotWaitOutcomes)
    slot_waits_.emplace_back(outcome, &slot_waits.Add({{"outcome", std::string(outcome)}}));
  slot_wait_seconds_ = &prometheus::BuildHistogram()
                            .Name("prefixgate_slot_wait_seconds")
                            .Help("How long a request waited at the gateway for a slot engine's busy slot")
                            .Register(*registry_)
                            .Add({}, prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                                              0.5, 1, 2.5, 5, 10, 30});
}

void GatewayMetrics::disaggregated(std::string_view outcome, double prefill_seconds, double handoff_seconds) {
  for (auto& [name, counter] : pd_requests_)
    if (name == outcome) counter->Increment();
  if (prefill_seconds >= 0) pd_prefill_seconds_->Observe(prefill_seconds);
  if (handoff_seconds >= 0) pd_handoff_seconds_->Observe(handoff_seconds);
}

void GatewayMetrics::requestDone(const std::string& model, const std::string& pod, int status,
                                 const std::string& strategy, double seconds) {
  Shard::RequestSeries& series = shard().requestSeries(model, pod, status, strategy);
  add<uint64_t>(series.count, 1);
  series.duration.observe(seconds);
}

void GatewayMetrics::firstByte(const std::string& model, double seconds) { shard().firstByte(model).observe(seconds); }

void GatewayMetrics::upstreamError(const std::string& pod, const std::string& reason) {
  upstream_errors_.Add({{"pod", pod}, {"reason", reason}}).Increment();
}

void GatewayMetrics::retried(const std::string& reason) { retries_.Add({{"reason", reason}}).Increment(); }

void GatewayMetrics::slotWaited(std::string_view outcome, double seconds) {
  for (auto& [name, counter] : slot_waits_)
    if (name == outcome) counter->Increment();
  slot_wait_seconds_->Observe(seconds);
}

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

void GatewayMetrics::addScrapedCounter(ScrapedCounter counter) {
  auto& family = prometheus::BuildCounter().Name(counter.name).Help(counter.help).Register(*registry_);
  scraped_.push_back({std::move(counter), &family});
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
    pod_in_flight_.Add({{"pod", pod->name()}}).Set(pod->signals().inFlight());
    pod_ready_.Add({{"pod", pod->name()}}).Set(r ? 1 : 0);
    // Kept by each pod's EngineLoad; a counter only goes up: each series takes the increase since the last scrape.
    for (size_t i = 0; i < static_cast<size_t>(engine::ScrapeError::kCount); ++i) {
      const auto reason = static_cast<engine::ScrapeError>(i);
      const auto total = static_cast<double>(pod->engine().scrapeErrors(reason));
      if (total == 0) continue;
      prometheus::Counter& counter =
          engine_scrape_errors_.Add({{"pod", pod->name()}, {"reason", std::string(engine::scrapeErrorLabel(reason))}});
      if (total > counter.Value()) counter.Increment(total - counter.Value());
    }
  }
  // A counter only goes up: each series takes the increase since the last scrape.
  for (ScrapedFamily& scraped : scraped_) {
    for (const auto& [labels, total] : scraped.source.read()) {
      prometheus::Counter& counter = scraped.family->Add(labels);
      const double seen = counter.Value();
      if (static_cast<double>(total) > seen) counter.Increment(static_cast<double>(total) - seen);
    }
  }
  pods_.Add({{"state", "ready"}}).Set(ready);
  pods_.Add({{"state", "not_ready"}}).Set(not_ready);
  std::vector<prometheus::MetricFamily> families = mergeShards();
  for (auto& f : registry_->Collect()) families.push_back(std::move(f));
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace prefixgate::metrics
