#include "discovery/health_checker.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>

#include "net/http_get.h"
#include "util/log.h"

namespace prefixgate::discovery {
namespace asio = boost::asio;

HealthChecker::HealthChecker(asio::io_context& io, PodRegistry& registry, config::HealthCheckConfig config)
    : io_(io), registry_(registry), config_(config), timer_(io) {}

void HealthChecker::start() {
  registry_.onAdded([this](const PodPtr& pod) { asio::post(io_, [this, pod] { check(pod); }); });
  // A pod that leaves has its connection closed.
  registry_.onRemoved([this](PodId pod) { asio::post(io_, [this, pod] { connections_.forget(pod.value); }); });
  asio::post(io_, [this] {
    for (const PodPtr& pod : registry_.snapshot()->pods()) check(pod);
    tick();
  });
}

void HealthChecker::stop() {
  asio::post(io_, [this] {
    stopped_ = true;
    timer_.cancel();
  });
}

void HealthChecker::tick() {
  if (stopped_) return;
  timer_.expires_after(std::chrono::milliseconds(config_.interval_ms));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    for (const PodPtr& pod : registry_.snapshot()->pods()) check(pod);
    tick();
  });
}

void HealthChecker::check(PodPtr pod) {
  if (stopped_ || pod->removed() || !checking_.insert(pod->id().value).second) return;
  asio::co_spawn(
      io_,
      [this, pod, connection = connections_.of(pod->id().value)]() -> asio::awaitable<void> {
        auto result = co_await connection->get(pod->spec().host, pod->spec().port, "/health",
                                               std::chrono::milliseconds(config_.timeout_ms), 64 * 1024);
        bool ok = result.status == 200;
        bool was_ready = pod->healthy();
        pod->recordHealth(ok, config_.healthy_threshold, config_.unhealthy_threshold);
        if (pod->healthy() != was_ready) {
          if (pod->healthy()) log::info("pod {} ({}) is ready", pod->name(), pod->spec().address);
          else
            log::warn("pod {} ({}) is not ready: {}", pod->name(), pod->spec().address,
                      ok ? "" : (result.status ? "status " + std::to_string(result.status) : result.error));
        }
        checking_.erase(pod->id().value);
      },
      asio::detached);
}

}  // namespace prefixgate::discovery
