#pragma once
// Engine metrics scraping: every scrape_interval_ms, GET /metrics of every ready pod, read it in the pod's dialect
// (engine_metrics.h; `engine: auto` recognises it from the page) and publish what it says about load into the pod's
// EngineLoad, on a connection kept alive between scrapes (net::KeptConnection). A page without a single series of the dialect is a failed scrape, counted and logged once per
// streak: a pod whose signals cannot be read must never look idle. llama.cpp pods also get GET /props (their
// slots and context: the KV capacity), every kSlotsRefreshMs. Runs on the control io_context; a request never waits for it, and a slow
// pod only delays its own next scrape (one scrape in flight per pod, each bounded by scrape_timeout_ms).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <functional>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "config/config.h"
#include "net/http_get.h"
#include "discovery/pod_set.h"

namespace prefixgate::engine {

class MetricsScraper {
 public:
  using NowMs = std::function<int64_t()>;  // the steady clock in ms (the time base of routing decisions)
  MetricsScraper(boost::asio::io_context& io, discovery::PodRegistry& registry, config::EngineMetricsConfig config,
                 NowMs now_ms);
  // Starts the periodic loop. Call on any thread.
  void start();
  // Stops scheduling scrapes (those in flight end within their timeout, or with the io_context). Any thread.
  void stop();

 private:
  void tick();
  void scrape(discovery::PodPtr pod);
  // llama.cpp: the pod's slots and their context from GET /props (its KV capacity), when due.
  boost::asio::awaitable<void> readSlots(const discovery::PodPtr& pod, net::KeptConnection& connection);
  boost::asio::io_context& io_;
  discovery::PodRegistry& registry_;
  config::EngineMetricsConfig config_;
  NowMs now_ms_;
  boost::asio::steady_timer timer_;
  std::unordered_set<uint32_t> scraping_;  // pod ids with a scrape in flight (io thread only)
  std::unordered_map<uint32_t, int64_t> slots_read_ms_;  // when each llama.cpp pod's /props was last asked (io thread)
  net::KeptConnections connections_;  // each pod's, kept alive between rounds (io thread); a round holds its own
  bool stopped_ = false;
};

}  // namespace prefixgate::engine
