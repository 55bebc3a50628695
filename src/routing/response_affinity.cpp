#include "routing/response_affinity.h"

#include "openai/responses_request.h"

namespace prefixgate::routing {

ResponseAffinity::ResponseAffinity(size_t max_entries, int64_t ttl_ms, NowMs now_ms)
    : max_entries_(max_entries), ttl_ms_(ttl_ms), now_ms_(std::move(now_ms)) {}

void ResponseAffinity::eraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void ResponseAffinity::putLocked(std::string_view id, std::string_view pod, int64_t expires_ms, bool keep_later) {
  std::string key(id);
  if (auto it = entries_.find(key); it != entries_.end()) {
    if (keep_later && it->second.expires_ms > expires_ms) return;
    it->second.pod.assign(pod);
    it->second.expires_ms = expires_ms;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return;
  }
  while (entries_.size() >= max_entries_) eraseLocked(entries_.find(lru_.back()));
  lru_.push_front(key);
  entries_.emplace(std::move(key), Entry{std::string(pod), expires_ms, lru_.begin()});
}

void ResponseAffinity::remember(std::string_view id, std::string_view pod) {
  if (max_entries_ == 0 || !openai::validResponseId(id)) return;
  const int64_t expires = now_ms_() + ttl_ms_;
  {
    std::lock_guard lock(mutex_);
    putLocked(id, pod, expires, false);
  }
  if (sink_) sink_->responseRemembered(id, pod);
}

bool ResponseAffinity::applyRemote(std::string_view id, std::string_view pod, int64_t age_ms) {
  if (max_entries_ == 0 || !openai::validResponseId(id) || age_ms < 0 || age_ms >= ttl_ms_) return false;
  const int64_t expires = now_ms_() - age_ms + ttl_ms_;
  std::lock_guard lock(mutex_);
  putLocked(id, pod, expires, true);
  return true;
}

std::optional<std::string> ResponseAffinity::podOf(std::string_view id) {
  if (!openai::validResponseId(id)) return std::nullopt;
  const int64_t now = now_ms_();
  std::lock_guard lock(mutex_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) return std::nullopt;
  if (it->second.expires_ms <= now) {
    eraseLocked(it);
    return std::nullopt;
  }
  it->second.expires_ms = now + ttl_ms_;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.pod;
}

std::optional<std::string> ResponseAffinity::eraseId(std::string_view id) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) return std::nullopt;
  std::string pod = std::move(it->second.pod);
  eraseLocked(it);
  return pod;
}

void ResponseAffinity::forget(std::string_view id) {
  const std::optional<std::string> pod = eraseId(id);
  if (pod && sink_) sink_->responseForgotten(id, *pod);
}

void ResponseAffinity::forgetRemote(std::string_view id) { eraseId(id); }

size_t ResponseAffinity::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

void ResponseAffinity::count(Outcome outcome) {
  std::lock_guard lock(mutex_);
  ++outcomes_[static_cast<int>(outcome)];
}

uint64_t ResponseAffinity::counted(Outcome outcome) const {
  std::lock_guard lock(mutex_);
  return outcomes_[static_cast<int>(outcome)];
}

}  // namespace prefixgate::routing
