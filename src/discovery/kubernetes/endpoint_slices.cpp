#include "discovery/kubernetes/endpoint_slices.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace prefixgate::discovery::kubernetes {
namespace {

using nlohmann::json;

// A string member, or "" when absent or not a string.
std::string text(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// conditions.ready: null (absent) means ready, per the API reference ("unknown state ... should be interpreted as
// ready"); terminating true means the pod is going away and takes no new requests.
bool endpointReady(const json& endpoint) {
  auto conditions = endpoint.find("conditions");
  if (conditions == endpoint.end() || !conditions->is_object()) return true;
  auto ready = conditions->find("ready");
  auto terminating = conditions->find("terminating");
  if (ready != conditions->end() && ready->is_boolean() && !ready->get<bool>()) return false;
  return !(terminating != conditions->end() && terminating->is_boolean() && terminating->get<bool>());
}

// The slice port named `name` (the first one when empty); 0 when none.
uint16_t slicePort(const json& slice, const std::string& name) {
  auto ports = slice.find("ports");
  if (ports == slice.end() || !ports->is_array()) return 0;
  for (const json& p : *ports) {
    if (!p.is_object() || (!name.empty() && text(p, "name") != name)) continue;
    auto port = p.find("port");
    if (port == p.end() || !port->is_number_integer()) return 0;
    const int64_t value = port->get<int64_t>();
    return value > 0 && value <= 65535 ? static_cast<uint16_t>(value) : 0;
  }
  return 0;
}

std::string tcpEndpoint(const std::string& host, uint32_t port) {
  return "tcp://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

std::string metadataField(const json& object, const char* key) {
  auto metadata = object.find("metadata");
  return metadata != object.end() && metadata->is_object() ? text(*metadata, key) : std::string();
}

std::vector<PodSpec> slicePods(const json& slice, const config::KubernetesConfig& config, std::string& problem,
                               std::string* warning) {
  std::vector<PodSpec> pods;
  const json empty = json::object();
  const json& metadata = slice.contains("metadata") && slice["metadata"].is_object() ? slice["metadata"] : empty;
  const json& labels = metadata.contains("labels") && metadata["labels"].is_object() ? metadata["labels"] : empty;
  const std::string model = text(labels, config.model_label.c_str());
  if (model.empty()) {
    problem = "no label " + config.model_label + " (the model served)";
    return pods;
  }
  // An engine the gateway has no dialect for (or none named) is recognised from the pod's /metrics instead.
  const engine::EngineKind engine =
      config.engine_label.empty()
          ? engine::EngineKind::kAuto
          : engine::parseEngineKind(text(labels, config.engine_label.c_str())).value_or(engine::EngineKind::kAuto);
  PodRole role = PodRole::kBoth;
  if (const std::string value = config.role_label.empty() ? "" : text(labels, config.role_label.c_str());
      !value.empty()) {
    if (auto parsed = parseRole(value)) role = *parsed;
    else if (warning)
      *warning = "label " + config.role_label + ": unknown role '" + value + "' (expected " +
                 std::string(kRoleChoices) + "): its pods serve both legs";
  }
  const uint16_t port = slicePort(slice, config.port_name);
  if (port == 0) {
    problem = config.port_name.empty() ? "no port" : "no port named " + config.port_name;
    return pods;
  }
  auto endpoints = slice.find("endpoints");
  if (endpoints == slice.end() || !endpoints->is_array()) return pods;  // null: no endpoints yet
  for (const json& endpoint : *endpoints) {
    if (!endpoint.is_object() || !endpointReady(endpoint)) continue;
    auto addresses = endpoint.find("addresses");
    auto target = endpoint.find("targetRef");
    if (addresses == endpoint.end() || !addresses->is_array() || addresses->empty() || !(*addresses)[0].is_string())
      continue;
    PodSpec spec;
    spec.name = target != endpoint.end() && target->is_object() ? text(*target, "name") : "";
    spec.host = (*addresses)[0].get<std::string>();
    if (spec.name.empty() || spec.host.empty()) continue;
    spec.port = port;
    const bool v6 = spec.host.find(':') != std::string::npos;
    spec.address = (v6 ? "[" + spec.host + "]" : spec.host) + ":" + std::to_string(port);
    spec.models = {model};
    spec.engine = engine;
    spec.role = role;
    if (config.kv_events_port) spec.kv_events = tcpEndpoint(spec.host, config.kv_events_port);
    if (config.kv_replay_port) spec.kv_replay = tcpEndpoint(spec.host, config.kv_replay_port);
    pods.push_back(std::move(spec));
  }
  return pods;
}

void SliceSet::put(const std::string& ns, const std::string& name, std::vector<PodSpec> pods) {
  slices_[ns][name] = std::move(pods);
}

void SliceSet::erase(const std::string& ns, const std::string& name) {
  auto it = slices_.find(ns);
  if (it != slices_.end()) it->second.erase(name);
}

void SliceSet::replace(const std::string& ns, std::map<std::string, std::vector<PodSpec>> slices) {
  slices_[ns] = std::move(slices);
}

std::vector<PodSpec> SliceSet::pods() const {
  std::map<std::string, PodSpec> by_name;
  for (const auto& [ns, slices] : slices_)
    for (const auto& [name, pods] : slices)
      for (const PodSpec& pod : pods) {
        const std::string key = qualify_names_ ? ns + "/" + pod.name : pod.name;
        auto [it, added] = by_name.emplace(key, pod);
        if (added) {
          if (qualify_names_) it->second.name = key;
          continue;
        }
        for (const std::string& model : pod.models)
          if (std::find(it->second.models.begin(), it->second.models.end(), model) == it->second.models.end())
            it->second.models.push_back(model);
      }
  std::vector<PodSpec> out;
  out.reserve(by_name.size());
  for (auto& [name, pod] : by_name) out.push_back(std::move(pod));
  return out;
}

}  // namespace prefixgate::discovery::kubernetes
