#include "engine/engine_load.h"

#include <algorithm>
#include <cmath>

namespace prefixgate::engine {
namespace {
constexpr double kTimeConstantMs = 10000;  // the capacity EWMA's time constant (10 s, as AIBrix)
constexpr int64_t kMinIntervalMs = 100;    // tokens are pooled over at least this long before updating the rate
constexpr int64_t kStaleIntervals = 3;     // scrape intervals without a success before engine data turns neutral
}  // namespace

int64_t maxEngineMetricsAgeMs(uint32_t scrape_interval_ms, uint32_t scrape_timeout_ms) {
  return std::max<int64_t>(kStaleIntervals * scrape_interval_ms,
                           static_cast<int64_t>(scrape_interval_ms) + scrape_timeout_ms);
}

void EngineLoad::publish(const EngineSnapshot& snapshot) {
  std::lock_guard lock(mutex_);
  snapshot_ = snapshot;
  snapshot_.valid = true;
  snapshot_.stale = false;
  snapshot_.failed_scrapes = 0;
  snapshot_.last_error.clear();
  waiting_.store(snapshot.has_waiting ? snapshot.waiting : NAN, std::memory_order_relaxed);
  kv_usage_.store(snapshot.has_kv_usage ? snapshot.kv_usage : NAN, std::memory_order_relaxed);
  scraped_at_ms_.store(snapshot.scraped_at_ms, std::memory_order_relaxed);
  if (snapshot.has_kv_capacity && snapshot.kv_capacity_tokens >= 1)
    kv_capacity_tokens_.store(static_cast<uint64_t>(snapshot.kv_capacity_tokens), std::memory_order_relaxed);
}

void EngineLoad::markScrapeFailed(std::string error, ScrapeError reason) {
  scrape_errors_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  snapshot_.stale = true;
  ++snapshot_.failed_scrapes;
  snapshot_.last_error = std::move(error);
}

void EngineLoad::markCapacityFailed(std::string error) {
  scrape_errors_[static_cast<size_t>(ScrapeError::kProps)].fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  capacity_error_ = std::move(error);
}

void EngineLoad::publishSlots(uint32_t slots, uint32_t slot_context_tokens) {
  {
    std::lock_guard lock(mutex_);
    capacity_error_.clear();
  }
  slots_.store(slots, std::memory_order_relaxed);
  kv_capacity_tokens_.store(uint64_t{slots} * slot_context_tokens, std::memory_order_relaxed);
}

std::optional<EngineLoad::SlotCache> EngineLoad::voteSlotCache(bool host) {
  const SlotCache now = slotCache();
  if (now == SlotCache::kHostCache) return std::nullopt;
  // Slots only, decided early, is revised if hits beyond the slots keep coming (kSlotCacheRevisions of them).
  if (now == SlotCache::kSlotsOnly) {
    if (!host || slot_cache_revisions_.fetch_add(1, std::memory_order_relaxed) + 1 < kSlotCacheRevisions)
      return std::nullopt;
  } else {
    const int32_t votes = slot_cache_votes_.fetch_add(host ? 1 : -1, std::memory_order_relaxed) + (host ? 1 : -1);
    if (votes > -kSlotCacheVotes && votes < kSlotCacheVotes) return std::nullopt;
    host = votes > 0;
  }
  SlotCache expected = now;
  const SlotCache decided = host ? SlotCache::kHostCache : SlotCache::kSlotsOnly;
  if (!slot_cache_.compare_exchange_strong(expected, decided, std::memory_order_relaxed)) return std::nullopt;
  return decided;
}

std::string_view scrapeErrorLabel(ScrapeError error) {
  switch (error) {
    case ScrapeError::kUnreachable: return "unreachable";
    case ScrapeError::kStatus: return "status";
    case ScrapeError::kUnknownSeries: return "unknown_series";
    case ScrapeError::kProps: return "props";
    case ScrapeError::kCount: break;
  }
  return "unreachable";
}

void EngineLoad::addOutputTokens(uint64_t tokens, int64_t now_ms) {
  std::lock_guard lock(mutex_);
  if (last_ms_ == 0) last_ms_ = now_ms;
  pending_tokens_ += static_cast<double>(tokens);
  const int64_t dt = now_ms - last_ms_;
  if (dt < kMinIntervalMs) return;
  const double sample = pending_tokens_ * 1000.0 / static_cast<double>(dt);
  const double alpha = 1 - std::exp(-static_cast<double>(dt) / kTimeConstantMs);
  rate_ = has_rate_ ? rate_ + alpha * (sample - rate_) : sample;
  has_rate_ = true;
  pending_tokens_ = 0;
  last_ms_ = now_ms;
  capacity_.store(rate_, std::memory_order_relaxed);
}

double EngineLoad::capacityTokensPerSecond(int64_t now_ms) const {
  std::lock_guard lock(mutex_);
  return has_rate_ ? rate_ : 0;
}

}  // namespace prefixgate::engine
