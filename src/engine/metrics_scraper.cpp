#include "engine/metrics_scraper.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include "engine/engine_metrics.h"
#include "net/http_get.h"
#include "util/log.h"

namespace prefixgate::engine {
namespace asio = boost::asio;

namespace {
// A vLLM page is tens of KiB (histograms per model); this bounds a misbehaving endpoint, not a real one.
constexpr size_t kMaxMetricsBytes = 8u << 20;
// llama.cpp's /props is a few KiB (its chat template included).
constexpr size_t kMaxPropsBytes = 1u << 20;
// /props changes only when the engine restarts: asked again every 30 s, every 2 s while unknown.
constexpr int64_t kSlotsRefreshMs = 30000;
constexpr int64_t kSlotsRetryMs = 2000;

// Why a 200 page could not be read, naming what the page does hold when it is another engine's.
std::string unknownSeriesMessage(EngineKind kind, std::string_view page) {
  const EngineKind found = recogniseEngine(page);
  if (kind == EngineKind::kAuto)
    return "its /metrics has no series of a known engine (vllm:, sglang:, llamacpp:); set the pod's engine";
  std::string why = "its /metrics has no " + std::string(engineKindName(kind)) + ": series";
  if (found != EngineKind::kAuto && found != kind)
    why += " but " + std::string(engineKindName(found)) + ": ones (is its engine: " +
           std::string(engineKindName(kind)) + " right?)";
  return why;
}
}  // namespace

MetricsScraper::MetricsScraper(asio::io_context& io, discovery::PodRegistry& registry,
                               config::EngineMetricsConfig config, NowMs now_ms)
    : io_(io), registry_(registry), config_(config), now_ms_(std::move(now_ms)), timer_(io) {}

void MetricsScraper::start() {
  // A pod that leaves has its connection closed.
  registry_.onRemoved([this](PodId pod) { asio::post(io_, [this, pod] { connections_.forget(pod.value); }); });
  asio::post(io_, [this] { tick(); });
}

void MetricsScraper::stop() {
  asio::post(io_, [this] {
    stopped_ = true;
    timer_.cancel();
  });
}

void MetricsScraper::tick() {
  if (stopped_) return;
  const int64_t now = now_ms_();
  auto snapshot = registry_.snapshot();
  for (const discovery::PodPtr& pod : snapshot->pods())
    if (pod->ready(now)) scrape(pod);
  // Pods that left (ids are never reused) are forgotten once they outnumber the live ones.
  if (slots_read_ms_.size() > 2 * snapshot->pods().size() + 16) {
    std::unordered_map<uint32_t, int64_t> live;
    for (const discovery::PodPtr& pod : snapshot->pods())
      if (auto it = slots_read_ms_.find(pod->id().value); it != slots_read_ms_.end()) live.insert(*it);
    slots_read_ms_.swap(live);
  }
  timer_.expires_after(std::chrono::milliseconds(config_.scrape_interval_ms));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void MetricsScraper::scrape(discovery::PodPtr pod) {
  if (stopped_ || pod->removed() || !scraping_.insert(pod->id().value).second) return;
  asio::co_spawn(
      io_,
      [this, pod, connection = connections_.of(pod->id().value)]() -> asio::awaitable<void> {
        auto result = co_await connection->get(pod->spec().host, pod->spec().port, "/metrics",
                                               std::chrono::milliseconds(config_.scrape_timeout_ms), kMaxMetricsBytes);
        EngineLoad& load = pod->engine();
        // `engine: auto` reads every page as whatever engine it names (an address may be given another engine).
        const EngineKind kind = pod->spec().engine;
        std::string why;
        ScrapeError reason = ScrapeError::kUnreachable;
        if (result.status == 200) {
          EngineSnapshot snapshot = parseEngineMetrics(kind, result.body);
          if (snapshot.known_series > 0) {
            if (kind == EngineKind::kAuto && load.detectedKind() != snapshot.engine) {
              log::info("pod {} ({}): engine recognised as {} from its /metrics", pod->name(), pod->spec().address,
                        engineKindName(snapshot.engine));
              load.setDetectedKind(snapshot.engine);
            }
            snapshot.scraped_at_ms = now_ms_();
            load.publish(snapshot);
            if (pod->engineKind() == EngineKind::kLlamaCpp) co_await readSlots(pod, *connection);
          } else {
            reason = ScrapeError::kUnknownSeries;
            why = unknownSeriesMessage(kind, result.body);
          }
        } else {
          reason = result.status ? ScrapeError::kStatus : ScrapeError::kUnreachable;
          why = result.status ? "status " + std::to_string(result.status) : result.error;
        }
        if (!why.empty()) {
          // Logged once per failure streak, so a pod without readable metrics does not flood the log.
          if (!load.latest().stale)
            log::warn("pod {} ({}): engine metrics scrape failed: {}; its load counts as unknown", pod->name(),
                      pod->spec().address, why);
          load.markScrapeFailed(std::move(why), reason);
        }
        scraping_.erase(pod->id().value);
      },
      asio::detached);
}

asio::awaitable<void> MetricsScraper::readSlots(const discovery::PodPtr& pod, net::KeptConnection& connection) {
  EngineLoad& load = pod->engine();
  const int64_t now = now_ms_();
  auto [last, fresh] = slots_read_ms_.try_emplace(pod->id().value, now);
  if (!fresh && now - last->second < (load.slots() ? kSlotsRefreshMs : kSlotsRetryMs)) co_return;
  last->second = now;
  auto result = co_await connection.get(pod->spec().host, pod->spec().port, "/props",
                                       std::chrono::milliseconds(config_.scrape_timeout_ms), kMaxPropsBytes);
  SlotCapacity capacity;
  std::string why;
  if (result.status != 200) why = result.status ? "/props answered " + std::to_string(result.status) : result.error;
  else if (parseLlamaCppProps(result.body, capacity, why)) {
    if (load.slots() != capacity.slots || load.kvCapacityTokens() != uint64_t{capacity.slots} * capacity.slot_context_tokens)
      log::info("pod {}: llama.cpp reports {} slots of {} tokens of context", pod->name(), capacity.slots,
                capacity.slot_context_tokens);
    load.publishSlots(capacity.slots, capacity.slot_context_tokens);
    co_return;
  }
  if (load.capacityError().empty())
    log::warn("pod {} ({}): cannot read its KV capacity: {}", pod->name(), pod->spec().address, why);
  load.markCapacityFailed(std::move(why));
}

}  // namespace prefixgate::engine
