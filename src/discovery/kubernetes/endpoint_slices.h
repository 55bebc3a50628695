#pragma once
// Kubernetes EndpointSlices (discovery.k8s.io/v1) as pods: the mapping of one slice's JSON to the pods it names,
// and the set of slices a watch keeps, merged into the pod list that PodRegistry::update takes. Pure: no sockets.
#include <nlohmann/json_fwd.hpp>

#include <map>
#include <string>
#include <vector>

#include "config/config.h"
#include "discovery/pod_set.h"

namespace prefixgate::discovery::kubernetes {

// metadata.<key> of a Kubernetes object when it is a string, else "" (name, resourceVersion).
std::string metadataField(const nlohmann::json& object, const char* key);

// The ready pods of one slice: endpoints whose conditions.ready is true or null and whose conditions.terminating
// is not true, each named by targetRef.name, at addresses[0] and the port named config.port_name (the first port
// when empty), serving the slice's config.model_label label. A slice without that label or port gives no pods and
// `problem` says why (a slice of an unrelated Service matched by a broad selector is not an error elsewhere). The
// pods' role is the slice's config.role_label label (parseRole; absent: both); a value parseRole does not know makes
// them `both` and, when `warning` is given, is named there (the slice's pods are still used).
std::vector<PodSpec> slicePods(const nlohmann::json& slice, const config::KubernetesConfig& config, std::string& problem,
                               std::string* warning = nullptr);

// The slices seen by the list and watch of each namespace, by namespace then slice name.
class SliceSet {
 public:
  // With several namespaces watched, pods are named "<namespace>/<pod>": two pods of one name in different
  // namespaces are different pods (pod names are unique only within a namespace).
  explicit SliceSet(bool qualify_names = false) : qualify_names_(qualify_names) {}
  void put(const std::string& ns, const std::string& name, std::vector<PodSpec> pods);
  void erase(const std::string& ns, const std::string& name);
  // A relist: the namespace's slices become exactly `slices`.
  void replace(const std::string& ns, std::map<std::string, std::vector<PodSpec>> slices);
  // Every pod once, by namespace and name: a pod in several slices (one per address family) keeps the address of
  // the first slice in slice name order and the union of their models. Sorted by (qualified) name.
  std::vector<PodSpec> pods() const;

 private:
  bool qualify_names_;
  std::map<std::string, std::map<std::string, std::vector<PodSpec>>> slices_;
};

}  // namespace prefixgate::discovery::kubernetes
