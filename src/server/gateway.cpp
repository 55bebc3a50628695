#include "server/gateway.h"

#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <chrono>

#include "config/random_seed.h"
#include "engine/engine_load.h"
#include "net/listener.h"
#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/kv/kv_sync.h"
#include "routing/session_table.h"
#include "server/control_plane.h"
#include "server/flow_gate.h"
#include "server/request_outcome.h"
#include "server/request_preparation.h"
#include "server/worker.h"
#include "sync/state_sync.h"
#include "tokenize/remote_tokenizer.h"
#include "trace/exporter.h"
#include "trace/tracer.h"
#include "util/log.h"
#include "util/scheduler_slice.h"

namespace prefixgate::server {
namespace asio = boost::asio;

namespace {
constexpr auto kDrainPoll = std::chrono::milliseconds(20);
// Descriptors beyond the connections: listeners, the pods file, engine metrics, KV event sockets, logs.
constexpr rlim_t kSpareDescriptors = 1024;

// Each client connection can hold an upstream one too: raise the soft descriptor limit toward what
// limits.max_connections needs (never above the hard limit), so the limit is what refuses clients, not EMFILE.
void raiseFileLimit(uint32_t max_connections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = rlim_t{max_connections} * 2 + kSpareDescriptors;
  if (limit.rlim_cur >= wanted) return;
  const rlim_t before = limit.rlim_cur;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  if (limit.rlim_cur > before && setrlimit(RLIMIT_NOFILE, &limit) == 0)
    log::info("open file limit raised from {} to {} for limits.max_connections ({})", before, limit.rlim_cur,
              max_connections);
  if (limit.rlim_cur < wanted)
    log::warn("open file limit {} is below the {} that limits.max_connections ({}) needs; raise the hard limit "
              "(ulimit -Hn) or lower limits.max_connections",
              limit.rlim_cur, wanted, max_connections);
}
}  // namespace

ControlPlane::ControlPlane(uint64_t seed) : rng(config::streamSeed(seed, config::SeedPurpose::kControlPlane)) {}

Gateway::Gateway(config::Config config)
    : config_(std::move(config)),
      credentials_(config_.auth, routing::steadyNowMs,
                   config_.flow_control.enabled ? flow::classNames(config_.flow_control) : std::vector<std::string>{}) {}

std::unique_ptr<tokenize::RemoteTokenizer> Gateway::makeRemoteTokenizer() {
  const auto& pc = config_.routing.prefix_cache;
  tokenize::RemoteTokenizerOptions options;
  options.timeout = std::chrono::milliseconds(pc.remote_tokenizer_timeout_ms);
  options.cache_entries = pc.remote_tokenizer_cache_entries;
  options.cache_bytes = size_t{pc.remote_tokenizer_cache_mb} << 20;
  options.max_cached_tokens = pc.remote_tokenizer_max_cached_tokens;
  // Unset: a quarter of the timeout, so a hedge still has most of the call's time to answer.
  const uint64_t quarter = static_cast<uint64_t>(options.timeout.count()) / 4;
  options.hedge_delay = std::chrono::milliseconds(pc.remote_tokenizer_hedge_delay_ms.value_or(quarter));
  options.breaker = {pc.remote_tokenizer_breaker_backoff_ms, pc.remote_tokenizer_breaker_max_backoff_ms};
  // The ready pods of the model, with the gateway's in-flight count of each (the tokenizer prefers the least loaded)
  // and the dialect each is spoken to in (kAuto until its /metrics names its engine: spoken to as vLLM).
  return std::make_unique<tokenize::RemoteTokenizer>(
      options, [this](std::string_view model, std::vector<tokenize::TokenizerPod>& out) {
        auto snapshot = pods_.snapshot();
        const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(model);
        if (!serving) return;
        const int64_t now = routing::steadyNowMs();
        for (const discovery::PodPtr& pod : *serving)
          if (pod->ready(now))
            out.push_back({pod->id().value, pod->name(), pod->spec().host, pod->spec().port, pod->signals().inFlight(),
                           pod->engineKind()});
      });
}

namespace {
// prefixgate_response_affinity_total{outcome}, read from the map's own counts at each scrape.
void addResponseAffinityCounter(metrics::GatewayMetrics& metrics, const routing::ResponseAffinity& affinity) {
  using Series = std::vector<std::pair<std::map<std::string, std::string>, uint64_t>>;
  using Outcome = routing::ResponseAffinity::Outcome;
  metrics.addScrapedCounter(
      {"prefixgate_response_affinity_total",
       "Responses API requests naming a response id (previous_response_id, /v1/responses/{id}), by outcome: hit "
       "(sent to the pod that produced it), pod_gone (that pod is no candidate: the strategy chose), unknown (the id "
       "is not remembered)",
       [&affinity] {
         return Series{{{{"outcome", "hit"}}, affinity.counted(Outcome::kHit)},
                       {{{"outcome", "pod_gone"}}, affinity.counted(Outcome::kPodGone)},
                       {{{"outcome", "unknown"}}, affinity.counted(Outcome::kUnknown)}};
       }});
}
}  // namespace

void Gateway::addRemoteTokenizerCounters() {
  using Series = std::vector<std::pair<std::map<std::string, std::string>, uint64_t>>;
  const tokenize::RemoteTokenizer& tokenizer = *remote_tokenizer_;
  metrics_.addScrapedCounter(
      {"prefixgate_remote_tokenizer_breaker_opens_total",
       "Times a pod's tokenize breaker opened (the pod is skipped for remote_tokenizer_breaker_backoff_ms, doubling "
       "while its probes fail), by what opened it: timeout, connection, or slow (a hedge sent later answered first)",
       [&tokenizer] {
         Series out;
         for (auto why : {tokenize::BreakerFailure::kTimeout, tokenize::BreakerFailure::kConnection,
                          tokenize::BreakerFailure::kSlow})
           out.push_back({{{"reason", std::string(tokenize::breakerFailureLabel(why))}}, tokenizer.breakerOpens(why)});
         return out;
       }});
  metrics_.addScrapedCounter(
      {"prefixgate_remote_tokenizer_hedges_total",
       "Second pods asked because the first had not answered within remote_tokenizer_hedge_delay_ms, by outcome: won "
       "(its answer was used), lost (the first pod's came first) or failed (neither answered)",
       [&tokenizer] {
         const tokenize::RemoteTokenizer::HedgeCounts n = tokenizer.hedges();
         return Series{
             {{{"outcome", "won"}}, n.won}, {{{"outcome", "lost"}}, n.lost}, {{{"outcome", "failed"}}, n.failed}};
       }});
}

void Gateway::startTracing() {
  const config::TracingConfig& t = config_.tracing;
  trace::ExporterOptions options;
  std::string error;
  trace::parseOtlpEndpoint(t.otlp_endpoint, options.endpoint, error);  // validated at load
  options.resource.service_name = t.service_name;
  options.resource.service_version = PREFIXGATE_VERSION;
  // The replica's id when state sync names one, else the host's name (a pod's name in Kubernetes).
  options.resource.service_instance_id = config_.state_sync.replica_id;
  if (char host[256] = {}; options.resource.service_instance_id.empty() && gethostname(host, sizeof host - 1) == 0)
    options.resource.service_instance_id = host;
  options.max_queued_spans = t.max_queued_spans;
  options.max_batch_spans = t.max_batch_spans;
  options.export_delay = std::chrono::milliseconds(t.export_delay_ms);
  options.export_timeout = std::chrono::milliseconds(t.export_timeout_ms);
  trace_exporter_ = std::make_unique<trace::OtlpExporter>(std::move(options));
  trace_exporter_->start();
  tracer_ = std::make_unique<trace::Tracer>(
      t.sample_ratio, [exporter = trace_exporter_.get()](trace::Span&& span) { exporter->submit(std::move(span)); });
  using Series = std::vector<std::pair<std::map<std::string, std::string>, uint64_t>>;
  const trace::OtlpExporter& exporter = *trace_exporter_;
  metrics_.addScrapedCounter(
      {"prefixgate_trace_spans_total",
       "Finished sampled spans by outcome: exported (the collector accepted them), dropped_queue_full (the export "
       "buffer held tracing.max_queued_spans), failed_export (the collector refused, failed or did not answer within "
       "tracing.export_timeout_ms)",
       [&exporter] {
         return Series{{{{"outcome", "exported"}}, exporter.exportedSpans()},
                       {{{"outcome", "dropped_queue_full"}}, exporter.droppedSpans()},
                       {{{"outcome", "failed_export"}}, exporter.failedSpans()}};
       }});
  metrics_.addScrapedCounter(
      {"prefixgate_trace_export_batches_total", "OTLP export requests sent to the collector, by outcome: ok or failed",
       [&exporter] {
         return Series{{{{"outcome", "ok"}}, exporter.exportedBatches()},
                       {{{"outcome", "failed"}}, exporter.failedBatches()}};
       }});
  log::info("tracing: spans to {} (sample_ratio {}, parent-based)", t.otlp_endpoint, t.sample_ratio);
}

Gateway::~Gateway() {
  beginShutdown();
  wait();
  // Its thread uses flow_, which is declared after it and so destroyed first (stopping twice is harmless).
  if (state_sync_) state_sync_->stop();
}

bool Gateway::start(std::string& error) {
  control_ = std::make_unique<ControlPlane>(config_.random_seed);
  if (std::vector<std::string> problems; !credentials_.load(problems)) {
    error = problems.front();
    return false;
  }
  prefix_ = routing::PrefixServices::create(config_, error);
  if (!prefix_) return false;
  prefix_metrics_ = std::make_unique<routing::PrefixMetrics>(metrics_.registry());
  if (prefix_->tokenizer().cacheStats()) {
    const tokenize::Tokenizer& tokenizer = prefix_->tokenizer();
    metrics_.addScrapedCounter(
        {"prefixgate_tokenizer_cache_segments_total",
         "Prompt segments (about 4 KiB, cut where tokenization cannot cross) whose tokens the tokenizer's segment "
         "cache had (outcome hit) or that were encoded and cached (miss); routing.prefix_cache.tokenizer_cache_mb",
         [&tokenizer] {
           const tokenize::Tokenizer::CacheStats stats = tokenizer.cacheStats().value_or(tokenize::Tokenizer::CacheStats{});
           return std::vector<std::pair<std::map<std::string, std::string>, uint64_t>>{
               {{{"outcome", "hit"}}, stats.hits}, {{{"outcome", "miss"}}, stats.misses}};
         }});
  }
  metrics_.addScrapedCounter(
      {"prefixgate_upstream_stale_connections_total",
       "Pooled engine connections the engine had closed: found closed before reuse (stage detected: nothing was "
       "sent), or found closed by a request written into it (stage sent: sent again on a fresh connection, counted "
       "against nobody)",
       [this] {
         uint64_t detected = 0, sent = 0;
         for (const auto& w : workers_) {
           detected += w->pool.staleDetected();
           sent += w->pool.staleSent();
         }
         return std::vector<std::pair<std::map<std::string, std::string>, uint64_t>>{
             {{{"stage", "detected"}}, detected}, {{{"stage", "sent"}}, sent}};
       }});
  metrics_.addScrapedCounter(
      {"prefixgate_body_budget_refusals_total",
       "Requests answered 503 (reason body_buffer_full) because their body would have taken the request bodies the "
       "gateway holds over limits.max_buffered_body_bytes",
       [this] {
         return std::vector<std::pair<std::map<std::string, std::string>, uint64_t>>{{{}, body_budget_.refusals()}};
       }});
  sessions_ = std::make_unique<routing::SessionTable>(routing::SessionTable::Settings::fromConfig(config_));
  routing::StrategyDeps deps{config_, prefix_.get(), prefix_metrics_.get(), sessions_.get()};
  router_ = std::make_unique<routing::Router>(routing::StrategyRegistry::builtin(), deps, pods_, routing::steadyNowMs);
  if (config_.routing.prefix_cache.remoteTokenizerOn()) {
    remote_tokenizer_ = makeRemoteTokenizer();
    addRemoteTokenizerCounters();
  }
  if (config_.flow_control.enabled) {
    flow_ = std::make_unique<FlowGate>(
        config_.flow_control, config_.limits.max_in_flight_per_pod, config_.routing.load_balance.kv_critical,
        engine::maxEngineMetricsAgeMs(config_.engine_metrics.scrape_interval_ms,
                                      config_.engine_metrics.scrape_timeout_ms),
        pods_, flow_metrics_, routing::steadyNowMs);
  }
  response_affinity_ = std::make_unique<routing::ResponseAffinity>(
      config_.routing.response_affinity.max_entries,
      static_cast<int64_t>(std::min<uint64_t>(config_.routing.response_affinity.ttl_ms, INT64_MAX / 2)),
      routing::steadyNowMs);
  addResponseAffinityCounter(metrics_, *response_affinity_);
  preparation_ = std::make_unique<RequestPreparation>(RequestPreparation::Deps{
      .config = config_,
      .router = *router_,
      .pods = pods_,
      .credentials = credentials_,
      .api_key_metrics = api_key_metrics_,
      .metrics = metrics_,
      .prefix_metrics = *prefix_metrics_,
      .active_requests = active_requests_,
      .tokenizer = remote_tokenizer_.get(),
      .flow = flow_.get(),
      .response_affinity = response_affinity_.get(),
  });
  if (config_.tracing.enabled()) startTracing();
  session_services_ = std::make_unique<SessionServices>(SessionServices{
      .config = config_,
      .draining = draining_,
      .open_connections = open_connections_,
      .body_budget = body_budget_,
      .pods = pods_,
      .preparation = *preparation_,
      .outcomes = {metrics_, pods_, active_requests_, tracer_.get()},
      .response_affinity = *response_affinity_,
  });
  // A pod that leaves stops matching in the index at once (its PodId is never reused), and its tokenize breaker goes.
  pods_.onRemoved([this](PodId id) {
    prefix_->removePod(id);
    if (remote_tokenizer_) remote_tokenizer_->forgetPod(id.value);
  });
  if (!startDiscovery(error)) return false;
  if (routing::KvEventIndex* kv = prefix_->kvEvents()) {
    kv_sync_ = std::make_unique<routing::KvSync>(pods_, *kv, metrics_.registry(), engine::KvEventSubscriber::Options{});
    kv_sync_->start();
  }
  if (config_.state_sync.enabled) {
    // With KV event sync each replica subscribes to every engine itself: its records are not shared (session pins
    // and in-flight counts are).
    const bool share_records = prefix_->kvEvents() == nullptr;
    // With flow control on, each replica's service per tenant is shared too (flow_ is built above).
    state_sync_ = std::make_unique<sync::StateSync>(config_.state_sync, prefix_->recordExpiry(), share_records,
                                                    pods_, prefix_.get(), sessions_.get(), metrics_.registry(),
                                                    flow_.get(), response_affinity_.get());
    if (share_records) prefix_->setRecordSink(state_sync_.get());
    sessions_->setSink(state_sync_.get());
    response_affinity_->setSink(state_sync_.get());  // the Responses API's ids, remembered and forgotten
    state_sync_->start();
  }
  control_->health = std::make_unique<discovery::HealthChecker>(control_->io, pods_, config_.health_check);
  control_->scraper =
      std::make_unique<engine::MetricsScraper>(control_->io, pods_, config_.engine_metrics, routing::steadyNowMs);

  raiseFileLimit(config_.limits.max_connections);
  std::string host;
  uint16_t port = 0;
  unsigned threads = config_.threads ? config_.threads : std::max(1u, std::thread::hardware_concurrency());
  try {
    net::splitHostPort(config_.listen, host, port);
    for (unsigned i = 0; i < threads; ++i) {
      // Thread i's streams are the same in every run with the same random_seed (random when it is 0).
      const uint64_t seed = config_.random_seed;
      auto w = std::make_unique<Worker>(*session_services_,
                                        std::chrono::milliseconds(config_.upstream.pool_idle_ms),
                                        config::streamSeed(seed, config::SeedPurpose::kRouting, i),
                                        config::streamSeed(seed, config::SeedPurpose::kRequestId, i));
      // Port 0: the first acceptor gets a free port; the others share it through SO_REUSEPORT.
      net::openAcceptor(w->acceptor, host, listen_port_ ? listen_port_ : port, true);
      listen_port_ = w->acceptor.local_endpoint().port();
      workers_.push_back(std::move(w));
    }
    net::splitHostPort(config_.admin_listen, host, port);
    net::openAcceptor(control_->admin_acceptor, host, port, false);
    admin_port_ = control_->admin_acceptor.local_endpoint().port();
    if (!config_.health_listen.empty()) {
      net::splitHostPort(config_.health_listen, host, port);
      net::openAcceptor(control_->health_acceptor, host, port, false);
      health_port_ = control_->health_acceptor.local_endpoint().port();
    }
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }

  control_->signals.add(SIGTERM);
  control_->signals.add(SIGINT);
  control_->signals.async_wait([this](boost::system::error_code ec, int signal) {
    if (ec) return;
    log::info("signal {} received: draining (grace {} ms)", signal, config_.shutdown_grace_ms);
    beginShutdown();
  });
  control_->health->start();
  control_->scraper->start();
  control_->credential_files = credentials_.watch(control_->io);
  control_->admin.emplace(AdminServices{
      .config = config_,
      .pods = pods_,
      .metrics = metrics_,
      .credentials = credentials_,
      .bytes_per_token = prefix_->bytesPerToken(),
      .draining = draining_,
      .preparation = *preparation_,
      .state_sync = state_sync_.get(),
      .remote_tokenizer = remote_tokenizer_.get(),
      .flow = flow_.get(),
  });
  startAdmin(*control_);
  control_->thread = std::thread([this] { control_->io.run(); });
  drain_thread_ = std::thread([this] { drainAndStop(); });
  const std::chrono::microseconds slice(config_.scheduler_slice_us);
  for (auto& w : workers_) {
    w->pool.startSweeping();
    startAccepting(*w);
    w->thread = std::thread([wp = w.get(), slice] {
      seedRequestIds(wp->request_id_seed);
      std::string error;
      if (slice.count() > 0 && util::setThreadSchedulerSlice(slice, error) &&
          util::threadSchedulerSliceNs() != std::chrono::nanoseconds(slice).count())
        error = "the kernel did not apply it; custom slices need Linux 6.12 or later";
      if (!error.empty()) {
        static std::atomic<bool> warned{false};  // the same answer on every worker: said once
        if (!warned.exchange(true))
          log::warn("scheduler_slice_us: the event loops keep the kernel's default slice ({})", error);
      }
      wp->io.run();
    });
  }
  log::info("prefixgate {} listening on {}:{} ({} threads), admin on {}:{}, {} pods from {}", PREFIXGATE_VERSION,
            config_.listen.substr(0, config_.listen.rfind(':')), listen_port_, threads,
            config_.admin_listen.substr(0, config_.admin_listen.rfind(':')), admin_port_,
            pods_.snapshot()->pods().size(), config_.discovery.kubernetes ? "kubernetes" : config_.discovery.file);
  return true;
}

// Kubernetes discovery publishes its first pod set once its first list answers (readyz fails until then); the pods
// file is loaded before the listeners open.
bool Gateway::startDiscovery(std::string& error) {
  if (config_.discovery.kubernetes) {
    control_->kubernetes_source = std::make_unique<discovery::kubernetes::KubernetesPodSource>(
        control_->io, *config_.discovery.kubernetes, pods_, metrics_.registry());
    return control_->kubernetes_source->start(error);
  }
  control_->file_source = std::make_unique<discovery::FilePodSource>(
      control_->io, config_.discovery.file, std::chrono::milliseconds(config_.discovery.file_poll_interval_ms), pods_);
  auto problems = control_->file_source->start();
  if (!problems.empty()) error = problems.front();
  return problems.empty();
}

void Gateway::beginShutdown() {
  bool expected = false;
  if (!draining_.compare_exchange_strong(expected, true)) return;
  if (!control_) return;
  log::info("draining: /readyz now fails, listeners closed, waiting for {} requests in flight", active_requests_.load());
  for (auto& w : workers_) {
    asio::post(w->io, [wp = w.get()] {
      boost::system::error_code ignored;
      wp->acceptor.close(ignored);
      wp->accept_pause.cancel();
      closeIdleClients(*wp);
    });
  }
  std::lock_guard lock(drain_mutex_);
  drain_cv_.notify_all();
}

void Gateway::drainAndStop() {
  {
    std::unique_lock lock(drain_mutex_);
    drain_cv_.wait(lock, [this] { return draining_.load(std::memory_order_acquire); });
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.shutdown_grace_ms);
  while (active_requests_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(kDrainPoll);
  }
  if (active_requests_.load() > 0)
    log::warn("grace period over with {} requests still in flight; stopping", active_requests_.load());
  else
    log::info("drained: no request in flight; stopping");
  for (auto& w : workers_) {
    asio::post(w->io, [wp = w.get()] {
      wp->pool.stopSweeping();
      wp->pool.clear();
      wp->io.stop();
    });
  }
  if (control_->health) control_->health->stop();
  if (control_->scraper) control_->scraper->stop();
  if (kv_sync_) kv_sync_->stop();
  if (state_sync_) state_sync_->stop();
  if (control_->file_source) asio::post(control_->io, [this] { control_->file_source->stop(); });
  if (control_->kubernetes_source) control_->kubernetes_source->stop();
  asio::post(control_->io, [this] {
    for (auto& file : control_->credential_files) file->stop();
  });
  control_->io.stop();
}

void Gateway::wait() {
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
  // Every request has ended: what is queued goes out, within tracing.export_timeout_ms.
  if (trace_exporter_) trace_exporter_->stop();
  if (control_ && control_->thread.joinable()) control_->thread.join();
  if (drain_thread_.joinable()) drain_thread_.join();
}

}  // namespace prefixgate::server
