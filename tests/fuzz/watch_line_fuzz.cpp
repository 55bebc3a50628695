// libFuzzer target for one line of a Kubernetes EndpointSlice watch stream (discovery::kubernetes), which comes from
// the network: parsing must not crash, throw or trip a sanitizer; a parsed event has a name unless it is a BOOKMARK
// or an ERROR; the slice's pods are usable by discovery (name, host, port, the label's model) and the merged set
// names each pod once. Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "discovery/kubernetes/endpoint_slices.h"
#include "discovery/kubernetes/watch_protocol.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prefixgate::discovery::kubernetes;
  using prefixgate::fuzz::check;
  WatchEvent event;
  std::string error;
  if (!parseWatchLine(std::string_view(reinterpret_cast<const char*>(data), size), event, error)) {
    check(!error.empty());
    return 0;
  }
  if (event.type == WatchEvent::Type::kBookmark || event.type == WatchEvent::Type::kError) return 0;
  check(!event.name.empty());
  prefixgate::config::KubernetesConfig config;
  config.kv_events_port = 5557;
  std::string problem;
  SliceSet set;
  auto pods = slicePods(event.object, config, problem);
  for (const auto& pod : pods) {
    check(!pod.name.empty() && !pod.host.empty() && pod.port != 0 && pod.models.size() == 1);
    check(!pod.models[0].empty() && pod.kv_events.starts_with("tcp://"));
  }
  set.put("default", event.name, pods);
  set.put("default", event.name + "-v6", std::move(pods));
  std::set<std::string> names;
  for (const auto& pod : set.pods()) check(names.insert(pod.name).second);
  return 0;
}
