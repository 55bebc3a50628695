#include "routing/session_table.h"

#include <algorithm>

#include "config/yaml_reader.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {

void SessionTable::Settings::read(config::YamlReader& r) {
  r.read("ttl_ms", ttl_ms);
  r.read("max_sessions", max_sessions);
  if (ttl_ms == 0) r.problem("ttl_ms", "must be greater than 0");
  if (max_sessions == 0) r.problem("max_sessions", "must be greater than 0");
  if (max_sessions > 10'000'000) r.problem("max_sessions", "must be at most 10000000");
}

SessionTable::Settings SessionTable::Settings::fromConfig(const config::Config& config) {
  Settings settings;
  std::vector<std::string> ignored;
  readStrategySettings(config, std::string(kStrategyName), settings, ignored);
  return settings;
}

std::optional<PodId> SessionTable::lookup(std::string_view id, int64_t now_ms) {
  std::lock_guard lock(mutex_);
  auto it = table_.find(std::string(id));
  if (it == table_.end()) return std::nullopt;
  if (it->second.expires_ms <= now_ms) {
    lru_.erase(it->second.lru);
    table_.erase(it);
    return std::nullopt;
  }
  return it->second.pod;
}

SessionTable::Entry& SessionTable::insert(std::string_view id, const Entry& entry) {
  while (table_.size() >= settings_.max_sessions && !lru_.empty()) {
    table_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.emplace_front(id);
  Entry& added = table_.emplace(lru_.front(), entry).first->second;
  added.lru = lru_.begin();
  return added;
}

void SessionTable::remember(std::string_view id, PodId pod_id, const discovery::PodState* pod, int64_t now_ms) {
  const int64_t expires = now_ms + settings_.ttl_ms;
  std::optional<int64_t> tell;  // the pin's age to tell the sink, when it is to be told
  {
    std::lock_guard lock(mutex_);
    auto it = table_.find(std::string(id));
    if (it == table_.end()) {
      insert(id, Entry{pod_id, expires, now_ms, now_ms, {}});
      tell = 0;
    } else {
      Entry& e = it->second;
      lru_.splice(lru_.begin(), lru_, e.lru);
      e.expires_ms = expires;
      if (e.pod != pod_id) {
        e.pod = pod_id;
        e.pinned_ms = e.shared_ms = now_ms;
        tell = 0;
      } else if (now_ms - e.shared_ms >= settings_.ttl_ms / kRefreshDivisor) {
        e.shared_ms = now_ms;
        tell = now_ms - e.pinned_ms;
      }
    }
  }
  if (tell && pod && sink_) sink_->sessionPinned(id, *pod, *tell);
}

bool SessionTable::applyRemote(std::string_view id, const RemotePin& pin, int64_t now_ms) {
  const int64_t expires = pin.used_ms + settings_.ttl_ms;
  if (expires <= now_ms) return false;
  std::lock_guard lock(mutex_);
  auto it = table_.find(std::string(id));
  if (it == table_.end() || it->second.expires_ms <= now_ms) {
    if (it != table_.end()) {
      lru_.erase(it->second.lru);
      table_.erase(it);
    }
    insert(id, Entry{pin.pod, expires, pin.pinned_ms, pin.used_ms, {}});
    return true;
  }
  Entry& e = it->second;
  if (e.pod != pin.pod && pin.pinned_ms <= e.pinned_ms) return false;  // this table's pin is the newer one
  if (e.pod != pin.pod) {
    e.pod = pin.pod;
    e.pinned_ms = pin.pinned_ms;
  } else if (expires <= e.expires_ms) {
    return false;  // nothing newer than what the table holds
  }
  e.expires_ms = std::max(e.expires_ms, expires);
  e.shared_ms = std::max(e.shared_ms, pin.used_ms);
  lru_.splice(lru_.begin(), lru_, e.lru);
  return true;
}

size_t SessionTable::size() const {
  std::lock_guard lock(mutex_);
  return table_.size();
}

}  // namespace prefixgate::routing
