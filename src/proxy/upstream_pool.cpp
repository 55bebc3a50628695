#include "proxy/upstream_pool.h"

#include <algorithm>

#include "net/http_get.h"

namespace prefixgate::proxy {

namespace {
// Whether an idle connection can carry a request (net::idleSocketOpen: a late or stray answer from the engine would
// be read as the next request's response).
bool stillOpen(UpstreamStream& stream) {
  auto& socket = stream.socket();
  return socket.is_open() && net::idleSocketOpen(socket.native_handle());
}
}  // namespace

UpstreamPool::UpstreamPool(boost::asio::io_context& io, std::chrono::milliseconds idle_limit)
    : timer_(io), idle_limit_(idle_limit) {}

std::unique_ptr<UpstreamStream> UpstreamPool::take(PodId pod) {
  auto it = idle_.find(pod.value);
  if (it == idle_.end()) return nullptr;
  auto& list = it->second;
  const auto now = std::chrono::steady_clock::now();
  while (!list.empty()) {
    Idle idle = std::move(list.back());
    list.pop_back();
    // Most recently used first: the one least likely to have been closed by the engine.
    if (now - idle.since >= idle_limit_) continue;
    if (stillOpen(*idle.stream)) return std::move(idle.stream);
    stale_detected_.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void UpstreamPool::give(PodId pod, std::unique_ptr<UpstreamStream> stream) {
  stream->expires_never();
  stream->reads().pause();  // no read waits while it is pooled: the take() check sees a close
  idle_[pod.value].push_back(Idle{std::move(stream), std::chrono::steady_clock::now()});
}

void UpstreamPool::clear() { idle_.clear(); }

size_t UpstreamPool::idleCount() const {
  size_t n = 0;
  for (const auto& [pod, list] : idle_) n += list.size();
  return n;
}

void UpstreamPool::startSweeping() {
  sweeping_ = true;
  sweep();
}

void UpstreamPool::stopSweeping() {
  sweeping_ = false;
  timer_.cancel();
}

void UpstreamPool::sweep() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& list = it->second;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const Idle& i) { return now - i.since >= idle_limit_; }),
               list.end());
    it = list.empty() ? idle_.erase(it) : std::next(it);
  }
  if (!sweeping_) return;
  timer_.expires_after(std::min<std::chrono::milliseconds>(idle_limit_ / 2, std::chrono::milliseconds(1000)));
  timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && sweeping_) sweep();
  });
}

}  // namespace prefixgate::proxy
