#include "sync/flow_channel.h"

#include <algorithm>
#include <set>

namespace prefixgate::sync {

std::vector<flow::RemoteService> FlowServiceDeltas::update(const std::string& replica,
                                                           const std::vector<flow::ModelService>& models) {
  std::vector<flow::RemoteService> charges;
  auto known = replicas_.find(replica);
  ReplicaMemory next;
  for (const flow::ModelService& model : models) {
    ModelMemory& memory = next[model.model];
    memory.flows_created = model.flows_created;
    const ModelMemory* before = nullptr;
    if (known != replicas_.end())
      if (auto it = known->second.find(model.model); it != known->second.end()) before = &it->second;
    for (const flow::FlowService& f : model.flows) {
      std::pair<std::string, std::string> key(f.class_name, f.tenant);
      if (known != replicas_.end()) {
        const Seen* seen = nullptr;
        if (before)
          if (auto it = before->flows.find(key); it != before->flows.end()) seen = &it->second;
        double increase = 0;
        if (seen && seen->flow_seq == f.flow_seq) increase = f.total - seen->total;
        else if (!before || f.flow_seq >= before->flows_created) increase = f.total;
        if (increase > 0) charges.push_back(flow::RemoteService{model.model, f.class_name, f.tenant, increase});
      }
      memory.flows[std::move(key)] = Seen{f.flow_seq, f.total};
    }
  }
  replicas_[replica] = std::move(next);
  return charges;
}

void FlowServiceDeltas::keepOnly(const std::vector<std::string>& live) {
  const std::set<std::string_view> keep(live.begin(), live.end());
  for (auto it = replicas_.begin(); it != replicas_.end();)
    it = keep.count(it->first) ? std::next(it) : replicas_.erase(it);
}

FlowChannel::FlowChannel(const config::StateSyncConfig& config, const SyncKeys& keys, std::string_view replica_id,
                         flow::ServiceSharing& sharing, StateSyncMetrics& metrics, log::Throttle& malformed_warnings)
    : replica_ttl_ms_(config.replica_ttl_ms),
      keys_(keys),
      replica_id_(replica_id),
      sharing_(sharing),
      metrics_(metrics),
      malformed_warnings_(malformed_warnings) {}

void FlowChannel::appendPublish(std::string& commands) const {
  const std::string text = encodeFlowService(sharing_.localService(kMaxFlowServiceFlows));
  appendCommand(commands, {"SET", keys_.flow(replica_id_), text, "PX", std::to_string(replica_ttl_ms_)});
}

std::vector<std::string> FlowChannel::readable(std::vector<std::string> others) {
  std::sort(others.begin(), others.end());
  if (others.size() > kMaxFlowServiceReplicas) others.resize(kMaxFlowServiceReplicas);
  return others;
}

void FlowChannel::appendRead(std::string& commands, const std::vector<std::string>& readable) const {
  std::vector<std::string> keys;
  for (const std::string& id : readable) keys.push_back(keys_.flow(id));
  std::vector<std::string_view> args = {"MGET"};
  for (const std::string& k : keys) args.push_back(k);
  appendCommand(commands, args);
}

void FlowChannel::apply(const std::vector<std::string>& readable, const RedisReply& values) {
  deltas_.keepOnly(readable);
  std::vector<flow::RemoteService> charges;
  std::vector<flow::ModelService> models;
  for (size_t i = 0; i < readable.size() && i < values.elements.size(); ++i) {
    const RedisReply& value = values.elements[i];
    if (value.isNil()) {  // it does not run flow control, or its heartbeat expired
      deltas_.forget(readable[i]);
      continue;
    }
    FlowServiceDecode result =
        value.type == RedisReply::Type::kBulk ? decodeFlowService(value.str, models) : FlowServiceDecode::kMalformed;
    if (result != FlowServiceDecode::kOk) {
      // The replica's memory stays as it was: its next readable text is charged from there.
      (result == FlowServiceDecode::kTooLarge ? metrics_.flow_service_too_large : metrics_.flow_service_malformed)
          .Increment();
      if (uint64_t more = 0; malformed_warnings_.allow(more))
        log::warn("state sync: another replica's flow service text is dropped ({}, {} bytes; {} more since the last "
                  "such line)",
                  flowServiceDropLabel(result), value.str.size(), more);
      continue;
    }
    std::vector<flow::RemoteService> more = deltas_.update(readable[i], models);
    charges.insert(charges.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  if (charges.empty()) return;
  metrics_.flow_service_charges.Increment(static_cast<double>(charges.size()));
  sharing_.chargeRemote(charges);
}

}  // namespace prefixgate::sync
