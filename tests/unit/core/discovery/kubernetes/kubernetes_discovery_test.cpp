// Kubernetes discovery's pure parts: EndpointSlice JSON -> pods, the slice set, the watch line parser, the API
// server URL and request targets, the back-off, and the validation of discovery.kubernetes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "discovery/kubernetes/endpoint_slices.h"
#include "discovery/kubernetes/watch_protocol.h"

namespace prefixgate::discovery::kubernetes {
namespace {

using nlohmann::json;

// A slice in the shape of the API reference (discovery.k8s.io/v1), as the endpointslice controller writes it.
json slice(const std::string& name, json endpoints, json ports = json::parse(R"([{"name": "http", "port": 8000}])")) {
  return {{"kind", "EndpointSlice"},
          {"apiVersion", "discovery.k8s.io/v1"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"resourceVersion", "42"},
            {"labels", {{"kubernetes.io/service-name", "llama"}, {"model.aibrix.ai/name", "llama-3"}}}}},
          {"addressType", "IPv4"},
          {"endpoints", std::move(endpoints)},
          {"ports", std::move(ports)}};
}

json endpoint(const std::string& pod, const std::string& ip, json conditions) {
  json e = {{"addresses", {ip}}, {"targetRef", {{"kind", "Pod"}, {"namespace", "default"}, {"name", pod}}}};
  if (!conditions.is_null()) e["conditions"] = std::move(conditions);
  return e;
}

std::vector<std::string> names(const std::vector<PodSpec>& pods) {
  std::vector<std::string> out;
  for (const auto& p : pods) out.push_back(p.name);
  return out;
}

// Ready = conditions.ready true or null, and not terminating; each pod is its targetRef at addresses[0].
TEST(EndpointSlices, ReadyEndpointsBecomePods) {
  config::KubernetesConfig config;
  std::string problem;
  auto pods = slicePods(slice("s", {endpoint("a", "10.0.0.1", {{"ready", true}}), endpoint("b", "10.0.0.2", nullptr),
                                    endpoint("c", "10.0.0.3", {{"ready", false}}),
                                    endpoint("d", "10.0.0.4", {{"ready", false}, {"terminating", true}}),
                                    endpoint("e", "10.0.0.5", {{"terminating", true}}),
                                    endpoint("f", "10.0.0.6", {{"ready", nullptr}})}),
                        config, problem);
  EXPECT_TRUE(problem.empty());
  EXPECT_EQ(names(pods), (std::vector<std::string>{"a", "b", "f"}));
  EXPECT_EQ(pods[0].address, "10.0.0.1:8000");
  EXPECT_EQ(pods[0].host, "10.0.0.1");
  EXPECT_EQ(pods[0].port, 8000);
  EXPECT_EQ(pods[0].models, (std::vector<std::string>{"llama-3"}));
  EXPECT_TRUE(pods[0].kv_events.empty());
}

// Ensures the slice's engine label (AIBrix's model.aibrix.ai/engine by default) sets its pods' dialect; a value
// the gateway has no dialect for, or no label, leaves it to be recognised from each pod's /metrics.
TEST(EndpointSlices, EngineLabelSetsTheDialect) {
  config::KubernetesConfig config;
  std::string problem;
  json s = slice("s", {endpoint("a", "10.0.0.1", nullptr)});
  EXPECT_EQ(slicePods(s, config, problem)[0].engine, engine::EngineKind::kAuto);
  s["metadata"]["labels"]["model.aibrix.ai/engine"] = "sglang";
  EXPECT_EQ(slicePods(s, config, problem)[0].engine, engine::EngineKind::kSglang);
  s["metadata"]["labels"]["model.aibrix.ai/engine"] = "xllm";
  EXPECT_EQ(slicePods(s, config, problem)[0].engine, engine::EngineKind::kAuto);
  config.engine_label = "example.com/engine";
  s["metadata"]["labels"]["example.com/engine"] = "llamacpp";
  EXPECT_EQ(slicePods(s, config, problem)[0].engine, engine::EngineKind::kLlamaCpp);
  EXPECT_TRUE(problem.empty());
}

// Ensures the slice's role label (llm-d's llm-d.ai/role by default, or AIBrix's role-name) sets its pods' role:
// absent is both, prefill-decode is both, an unknown value is both with a warning naming the label and value (the
// pods still used), and role_label "" makes every pod both.
TEST(EndpointSlices, RoleLabelSetsThePodsRole) {
  config::KubernetesConfig config;
  std::string problem, warning;
  json s = slice("s", {endpoint("a", "10.0.0.1", nullptr), endpoint("b", "10.0.0.2", nullptr)});
  EXPECT_EQ(slicePods(s, config, problem, &warning)[0].role, PodRole::kBoth);
  s["metadata"]["labels"]["llm-d.ai/role"] = "prefill";
  auto pods = slicePods(s, config, problem, &warning);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].role, PodRole::kPrefill);
  EXPECT_EQ(pods[1].role, PodRole::kPrefill);
  s["metadata"]["labels"]["llm-d.ai/role"] = "decode";
  EXPECT_EQ(slicePods(s, config, problem, &warning)[0].role, PodRole::kDecode);
  s["metadata"]["labels"]["llm-d.ai/role"] = "prefill-decode";
  EXPECT_EQ(slicePods(s, config, problem, &warning)[0].role, PodRole::kBoth);
  EXPECT_TRUE(problem.empty());
  EXPECT_TRUE(warning.empty());
  s["metadata"]["labels"]["llm-d.ai/role"] = "encode";
  pods = slicePods(s, config, problem, &warning);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0].role, PodRole::kBoth);
  EXPECT_TRUE(problem.empty());
  EXPECT_EQ(warning, "label llm-d.ai/role: unknown role 'encode' (expected prefill, decode or both): its pods serve "
                     "both legs");
  config.role_label = "role-name";  // AIBrix's
  s["metadata"]["labels"]["role-name"] = "decode";
  EXPECT_EQ(slicePods(s, config, problem)[0].role, PodRole::kDecode);
  config.role_label = "";
  EXPECT_EQ(slicePods(s, config, problem)[0].role, PodRole::kBoth);
}

// An endpoint without a targetRef or an address names no pod; a slice with no endpoints (null) gives none.
TEST(EndpointSlices, EndpointsWithoutPodOrAddressAreSkipped) {
  config::KubernetesConfig config;
  std::string problem;
  json no_ref = {{"addresses", {"10.0.0.9"}}};
  json no_address = endpoint("z", "10.0.0.9", nullptr);
  no_address["addresses"] = json::array();
  EXPECT_TRUE(slicePods(slice("s", {no_ref, no_address}), config, problem).empty());
  EXPECT_TRUE(slicePods(slice("s", nullptr), config, problem).empty());
  EXPECT_TRUE(problem.empty());
}

// port_name picks the slice port; KV endpoints come from the pod IP; IPv6 addresses are bracketed.
TEST(EndpointSlices, NamedPortKvEndpointsAndIpv6) {
  config::KubernetesConfig config;
  config.port_name = "openai";
  config.kv_events_port = 5557;
  config.kv_replay_port = 5558;
  std::string problem;
  json ports = json::parse(R"([{"name": "metrics", "port": 9100}, {"name": "openai", "port": 8080}])");
  auto pods = slicePods(slice("s", {endpoint("a", "fd00::7", nullptr)}, ports), config, problem);
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_EQ(pods[0].address, "[fd00::7]:8080");
  EXPECT_EQ(pods[0].host, "fd00::7");
  EXPECT_EQ(pods[0].kv_events, "tcp://[fd00::7]:5557");
  EXPECT_EQ(pods[0].kv_replay, "tcp://[fd00::7]:5558");
  config.port_name.clear();  // empty = the first port
  EXPECT_EQ(slicePods(slice("s", {endpoint("a", "10.0.0.1", nullptr)}, ports), config, problem)[0].port, 9100);
}

// A slice without the model label or the named port gives no pods, and says why.
TEST(EndpointSlices, MissingLabelOrPortIsAProblem) {
  config::KubernetesConfig config;
  std::string problem;
  json s = slice("s", {endpoint("a", "10.0.0.1", nullptr)});
  s["metadata"]["labels"].erase("model.aibrix.ai/name");
  EXPECT_TRUE(slicePods(s, config, problem).empty());
  EXPECT_NE(problem.find("model.aibrix.ai/name"), std::string::npos);
  config.port_name = "grpc";
  problem.clear();
  EXPECT_TRUE(slicePods(slice("s", {endpoint("a", "10.0.0.1", nullptr)}), config, problem).empty());
  EXPECT_NE(problem.find("grpc"), std::string::npos);
}

PodSpec pod(const std::string& name, const std::string& address, const std::string& model) {
  PodSpec p;
  p.name = name;
  p.address = address;
  p.models = {model};
  return p;
}

// A pod in two slices (IPv4 and IPv6) appears once, with the first slice's address and both models; erase and
// replace change only their own slices.
TEST(SliceSet, MergesAPodsSlices) {
  SliceSet set;
  set.put("default", "llama-ipv4", {pod("a", "10.0.0.1:8000", "llama"), pod("b", "10.0.0.2:8000", "llama")});
  set.put("default", "llama-ipv6", {pod("a", "[fd00::1]:8000", "llama")});
  set.put("default", "qwen", {pod("a", "10.0.0.1:8000", "qwen")});
  auto pods = set.pods();
  EXPECT_EQ(names(pods), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(pods[0].address, "10.0.0.1:8000");
  EXPECT_EQ(pods[0].models, (std::vector<std::string>{"llama", "qwen"}));
  set.erase("default", "llama-ipv4");
  EXPECT_EQ(set.pods()[0].address, "[fd00::1]:8000");
  set.replace("default", {{"qwen", {pod("a", "10.0.0.1:8000", "qwen")}}});
  EXPECT_EQ(set.pods()[0].models, (std::vector<std::string>{"qwen"}));
  set.erase("default", "qwen");
  EXPECT_TRUE(set.pods().empty());
}

// With several namespaces watched, pods of one name in two namespaces are two pods, named "<namespace>/<pod>".
TEST(SliceSet, SameNameInTwoNamespacesIsTwoPods) {
  SliceSet set(true);
  set.put("default", "llama", {pod("a", "10.0.0.1:8000", "llama")});
  set.put("team", "llama", {pod("a", "10.0.1.1:8000", "llama")});
  auto pods = set.pods();
  EXPECT_EQ(names(pods), (std::vector<std::string>{"default/a", "team/a"}));
  EXPECT_EQ(pods[1].address, "10.0.1.1:8000");
}

// Each watch event type, with the object's name and resourceVersion; an ERROR carries its Status code.
TEST(WatchLine, ParsesEveryEventType) {
  WatchEvent event;
  std::string error;
  const json s = slice("llama-x1", json::array());
  for (auto [name, type] : {std::pair{"ADDED", WatchEvent::Type::kAdded}, {"MODIFIED", WatchEvent::Type::kModified},
                            {"DELETED", WatchEvent::Type::kDeleted}}) {
    ASSERT_TRUE(parseWatchLine(json{{"type", name}, {"object", s}}.dump(), event, error)) << error;
    EXPECT_EQ(event.type, type);
    EXPECT_EQ(event.name, "llama-x1");
    EXPECT_EQ(event.resource_version, "42");
  }
  ASSERT_TRUE(parseWatchLine(
      R"({"type":"BOOKMARK","object":{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"977"}}})",
      event, error));
  EXPECT_EQ(event.type, WatchEvent::Type::kBookmark);
  EXPECT_EQ(event.resource_version, "977");
  ASSERT_TRUE(parseWatchLine(
      R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 5 (9)","reason":"Expired","code":410}})j",
      event, error));
  EXPECT_EQ(event.type, WatchEvent::Type::kError);
  EXPECT_EQ(event.error_code, 410);
  EXPECT_EQ(event.error_message, "too old resource version: 5 (9)");
  // A Status with fields of unexpected types still parses (nothing throws on the watch path).
  ASSERT_TRUE(parseWatchLine(R"({"type":"ERROR","object":{"code":"x","message":7}})", event, error));
  EXPECT_EQ(event.error_code, 0);
  EXPECT_EQ(event.error_message, "");
}

// Lines that are not watch events are refused with a reason, never thrown on.
TEST(WatchLine, RefusesMalformedLines) {
  WatchEvent event;
  for (const char* line : {"", "{", "[1]", R"({"type":"ADDED"})", R"({"type":"RENAMED","object":{}})",
                           R"({"type":"ADDED","object":{"metadata":{}}})", R"({"type":7,"object":{}})"}) {
    std::string error;
    EXPECT_FALSE(parseWatchLine(line, event, error)) << line;
    EXPECT_FALSE(error.empty()) << line;
  }
}

TEST(ApiServer, ParsesSchemesHostsAndPorts) {
  ApiServer s;
  std::string error;
  ASSERT_TRUE(parseApiServer("https://10.96.0.1", s, error));
  EXPECT_TRUE(s.tls);
  EXPECT_EQ(s.host, "10.96.0.1");
  EXPECT_EQ(s.port, 443);
  ASSERT_TRUE(parseApiServer("http://localhost:8001/", s, error));
  EXPECT_FALSE(s.tls);
  EXPECT_EQ(s.port, 8001);
  ASSERT_TRUE(parseApiServer("https://[fd00::1]:6443", s, error));
  EXPECT_EQ(s.host, "fd00::1");
  EXPECT_EQ(s.port, 6443);
  for (const char* bad : {"ftp://x", "10.0.0.1:443", "https://", "https://h/api", "https://h:99999", "https://u@h"})
    EXPECT_FALSE(parseApiServer(bad, s, error)) << bad;
}

// The selector is escaped; the watch asks for bookmarks from the given version with a server-side timeout.
TEST(ApiTargets, ListAndWatchQueries) {
  EXPECT_EQ(listTarget("default", "model.aibrix.ai/name"),
            "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices?labelSelector=model.aibrix.ai%2Fname");
  EXPECT_EQ(listTarget("ns", ""), "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices");
  EXPECT_EQ(watchTarget("ns", "app=vllm,tier!=test", "977", std::chrono::seconds(300)),
            "/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices?labelSelector=app%3Dvllm%2Ctier%21%3Dtest"
            "&resourceVersion=977&allowWatchBookmarks=true&watch=1&timeoutSeconds=300");
}

TEST(Backoff, DoublesToTheCapAndResets) {
  Backoff b(std::chrono::milliseconds(500), std::chrono::seconds(30));
  std::vector<int64_t> delays;
  for (int i = 0; i < 8; ++i) delays.push_back(b.next().count());
  EXPECT_EQ(delays, (std::vector<int64_t>{500, 1000, 2000, 4000, 8000, 16000, 30000, 30000}));
  b.reset();
  EXPECT_EQ(b.next().count(), 500);
}

}  // namespace
}  // namespace prefixgate::discovery::kubernetes

namespace prefixgate::config {
namespace {

// discovery.kubernetes is accepted with its defaults; each bad key is named with the file and the reason.
TEST(Config, ValidatesKubernetesDiscovery) {
  Problems problems;
  Config ok = parseYaml("discovery: {kubernetes: {api_server: 'https://10.96.0.1:443'}}\n", "gw.yaml", problems);
  validate(ok, {"prefix-cache"}, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  ASSERT_TRUE(ok.discovery.kubernetes);
  EXPECT_EQ(ok.discovery.kubernetes->namespaces, (std::vector<std::string>{"default"}));

  Config bad = parseYaml(
      "discovery: {kubernetes: {api_server: 'ftp://x', namespaces: [], kv_events_port: 70000, model_label: ''}}\n",
      "gw.yaml", problems);
  validate(bad, {"prefix-cache"}, problems);
  auto has = [&](const std::string& needle) {
    for (const auto& p : problems)
      if (p.find(needle) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has("gw.yaml: discovery.kubernetes.api_server: expected an http:// or https:// URL"));
  EXPECT_TRUE(has("gw.yaml: discovery.kubernetes.namespaces: must list at least one namespace"));
  EXPECT_TRUE(has("gw.yaml: discovery.kubernetes.kv_events_port: must be at most 65535"));
  EXPECT_TRUE(has("gw.yaml: discovery.kubernetes.model_label"));
  EXPECT_FALSE(has("not supported"));
}

}  // namespace
}  // namespace prefixgate::config
