#include "engine/metrics_scraper.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include "engine/prometheus_text.h"
#include "net/http_get.h"
#include "util/log.h"

namespace prefixgate::engine {
namespace asio = boost::asio;

namespace {
// A vLLM page is tens of KiB (histograms per model); this bounds a misbehaving endpoint, not a real one.
constexpr size_t kMaxMetricsBytes = 8u << 20;
}  // namespace

MetricsScraper::MetricsScraper(asio::io_context& io, discovery::PodRegistry& registry,
                               config::EngineMetricsConfig config, NowMs now_ms)
    : io_(io), registry_(registry), config_(config), now_ms_(std::move(now_ms)), timer_(io) {}

void MetricsScraper::start() {
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
  for (const discovery::PodPtr& pod : registry_.snapshot()->pods())
    if (pod->ready(now)) scrape(pod);
  timer_.expires_after(std::chrono::milliseconds(config_.scrape_interval_ms));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) tick();
  });
}

void MetricsScraper::scrape(discovery::PodPtr pod) {
  if (stopped_ || pod->removed() || !scraping_.insert(pod->id().value).second) return;
  asio::co_spawn(
      io_,
      [this, pod]() -> asio::awaitable<void> {
        auto result = co_await net::httpGet(pod->spec().host, pod->spec().port, "/metrics",
                                            std::chrono::milliseconds(config_.scrape_timeout_ms), kMaxMetricsBytes);
        if (result.status == 200) {
          EngineSnapshot snapshot = parseVllmMetrics(result.body);
          snapshot.scraped_at_ms = now_ms_();
          pod->engine().publish(snapshot);
        } else {
          std::string why = result.status ? "status " + std::to_string(result.status) : result.error;
          // Logged once per failure streak, so a pod without /metrics does not flood the log.
          if (!pod->engine().latest().stale)
            log::warn("pod {} ({}): engine metrics scrape failed: {}", pod->name(), pod->spec().address, why);
          pod->engine().markScrapeFailed(std::move(why));
        }
        scraping_.erase(pod->id().value);
      },
      asio::detached);
}

}  // namespace prefixgate::engine
