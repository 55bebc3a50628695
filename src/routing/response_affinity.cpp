#include "routing/response_affinity.h"

#include "openai/responses_request.h"

namespace prefixgate::routing {

ResponseAffinity::ResponseAffinity(size_t max_entries, int64_t ttl_ms, NowMs now_ms)
    : max_entries_(max_entries), ttl_ms_(ttl_ms), now_ms_(std::move(now_ms)) {}

void ResponseAffinity::eraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void ResponseAffinity::remember(std::string_view id, std::string_view pod) {
  if (max_entries_ == 0 || !openai::validResponseId(id)) return;
  const int64_t expires = now_ms_() + ttl_ms_;
  std::lock_guard lock(mutex_);
  std::string key(id);
  if (auto it = entries_.find(key); it != entries_.end()) {
    it->second.pod.assign(pod);
    it->second.expires_ms = expires;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return;
  }
  while (entries_.size() >= max_entries_) eraseLocked(entries_.find(lru_.back()));
  lru_.push_front(key);
  entries_.emplace(std::move(key), Entry{std::string(pod), expires, lru_.begin()});
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

void ResponseAffinity::forget(std::string_view id) {
  std::lock_guard lock(mutex_);
  if (auto it = entries_.find(std::string(id)); it != entries_.end()) eraseLocked(it);
}

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
