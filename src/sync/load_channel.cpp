#include "sync/load_channel.h"

#include <algorithm>

namespace prefixgate::sync {

LoadChannel::LoadChannel(const config::StateSyncConfig& config, const SyncKeys& keys, std::string_view replica_id,
                         discovery::PodRegistry& pods, PodLookup& lookup, StateSyncMetrics& metrics)
    : replica_ttl_ms_(config.replica_ttl_ms),
      keys_(keys),
      replica_id_(replica_id),
      pods_(pods),
      lookup_(lookup),
      metrics_(metrics) {}

void LoadChannel::appendPublish(std::string& commands) const {
  std::vector<std::pair<std::string, int32_t>> loads;
  for (const discovery::PodPtr& pod : pods_.snapshot()->pods())
    loads.emplace_back(pod->spec().address, pod->signals().inFlight());
  appendCommand(commands, {"SET", keys_.load(replica_id_), encodeLoads(loads), "PX", std::to_string(replica_ttl_ms_)});
  appendCommand(commands, {"SADD", keys_.replicas, replica_id_});
  appendCommand(commands, {"SMEMBERS", keys_.replicas});
}

std::vector<std::string> LoadChannel::others(const RedisReply& members) const {
  std::vector<std::string> out;
  for (const RedisReply& m : members.elements)
    if (m.type == RedisReply::Type::kBulk && m.str != replica_id_) out.push_back(m.str);
  return out;
}

void LoadChannel::appendRead(std::string& commands, const std::vector<std::string>& others) const {
  std::vector<std::string> keys;
  for (const std::string& id : others) keys.push_back(keys_.load(id));
  std::vector<std::string_view> args = {"MGET"};
  for (const std::string& k : keys) args.push_back(k);
  appendCommand(commands, args);
}

LoadChannel::Read LoadChannel::decode(const std::vector<std::string>& others, const RedisReply& values) {
  Read read;
  for (size_t i = 0; i < others.size() && i < values.elements.size(); ++i) {
    const RedisReply& value = values.elements[i];
    if (value.isNil()) {
      read.gone.push_back(others[i]);
      continue;
    }
    read.live.push_back(others[i]);
    ByReplica loads;
    decodeLoads(value.str, loads);
    // Only pods this replica routes to: a text naming made-up addresses must not grow what is kept.
    for (const auto& [address, n] : loads)
      if (lookup_.find(address)) read.by_pod[address][others[i]] = n;
  }
  return read;
}

void LoadChannel::appendForget(std::string& commands, const std::vector<std::string>& gone) const {
  std::vector<std::string_view> args = {"SREM", keys_.replicas};
  for (const std::string& id : gone) args.push_back(id);
  appendCommand(commands, args);
}

void LoadChannel::apply(Read read, int64_t now_ms) {
  last_read_ms_ = now_ms;
  metrics_.replicas_gauge.Set(static_cast<double>(read.live.size() + 1));
  const size_t live_others = read.live.size();
  {
    std::lock_guard lock(view_mutex_);
    live_replicas_ = std::move(read.live);
  }
  setRemoteLoads(std::move(read.by_pod), live_others);
}

void LoadChannel::expireIfStale(int64_t now_ms) {
  if (now_ms - last_read_ms_ > static_cast<int64_t>(replica_ttl_ms_)) setRemoteLoads({}, 0);
}

void LoadChannel::setRemoteLoads(ByPod by_pod, size_t other_replicas) {
  for (const discovery::PodPtr& pod : pods_.snapshot()->pods()) {
    auto it = by_pod.find(pod->spec().address);
    const int32_t sum = it == by_pod.end() ? 0 : sumLoads(it->second);
    pod->signals().setRemoteInFlight(sum, static_cast<int32_t>(std::min<size_t>(other_replicas, kMaxOtherReplicas)));
  }
  std::lock_guard lock(view_mutex_);
  if (other_replicas == 0) live_replicas_.clear();
  by_pod_ = std::move(by_pod);
}

std::vector<std::pair<std::string, int32_t>> LoadChannel::replicaLoads(std::string_view address) const {
  std::lock_guard lock(view_mutex_);
  std::vector<std::pair<std::string, int32_t>> out;
  if (auto it = by_pod_.find(address); it != by_pod_.end())
    for (const auto& [replica, n] : it->second) out.emplace_back(replica, n);
  return out;
}

std::vector<std::string> LoadChannel::liveReplicas() const {
  std::lock_guard lock(view_mutex_);
  return live_replicas_;
}

}  // namespace prefixgate::sync
