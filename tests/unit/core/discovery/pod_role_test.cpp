// A pod's role in disaggregated prefill/decode: its names, the pods file's `role`, an edit of it, and the check that
// every model with prefill pods has a pod to decode on.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "discovery/file/pods_file.h"
#include "discovery/pod_set.h"
#include "unit/core/pod_specs.h"

namespace prefixgate::discovery {
namespace {

PodSpec spec(const std::string& name, uint16_t port, PodRole role, std::vector<std::string> models = {"m"}) {
  PodSpec s = testing::podSpec(name, port, std::move(models));
  s.role = role;
  return s;
}

// Ensures each role's name parses back to it, llm-d's prefill-decode is both, and anything else is refused.
TEST(PodRole, NamesRoundTrip) {
  EXPECT_EQ(roleName(PodRole::kPrefill), "prefill");
  EXPECT_EQ(roleName(PodRole::kDecode), "decode");
  EXPECT_EQ(roleName(PodRole::kBoth), "both");
  for (PodRole role : {PodRole::kBoth, PodRole::kPrefill, PodRole::kDecode}) EXPECT_EQ(parseRole(roleName(role)), role);
  EXPECT_EQ(parseRole("prefill-decode"), PodRole::kBoth);
  for (const char* bad : {"", "Prefill", "encode", "decoder", " both"}) EXPECT_EQ(parseRole(bad), std::nullopt) << bad;
}

// Ensures the pods file reads `role` (both when absent, prefill-decode as both) and refuses another value, naming
// the file, the pod's entry and name, and the key.
TEST(PodRole, PodsFileReadsTheRole) {
  std::vector<std::string> problems;
  auto pods = parsePodsFile(R"(pods:
  - {name: a, address: 127.0.0.1:1, models: [m]}
  - {name: b, address: 127.0.0.1:2, models: [m], role: prefill}
  - {name: c, address: 127.0.0.1:3, models: [m], role: decode}
  - {name: d, address: 127.0.0.1:4, models: [m], role: both}
  - {name: e, address: 127.0.0.1:5, models: [m], role: prefill-decode}
)", "pods.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  ASSERT_EQ(pods.size(), 5u);
  EXPECT_EQ(pods[0].role, PodRole::kBoth);
  EXPECT_EQ(pods[1].role, PodRole::kPrefill);
  EXPECT_EQ(pods[2].role, PodRole::kDecode);
  EXPECT_EQ(pods[3].role, PodRole::kBoth);
  EXPECT_EQ(pods[4].role, PodRole::kBoth);
  parsePodsFile("pods:\n  - {name: a, address: 127.0.0.1:1, models: [m]}\n"
                "  - {name: b, address: 127.0.0.1:2, models: [m], role: encoder}\n",
                "pods.yaml", problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "pods.yaml: pods[1].role: expected prefill, decode or both, got 'encoder' (pod b)");
}

// Ensures an edit of a pod's role changes it in place (same pod, same id) and is reported as "role".
TEST(PodRole, RoleEditKeepsThePod) {
  PodRegistry r;
  std::vector<std::string> changed;
  r.onChanged([&](const PodPtr& p, const PodSpec& before) { changed.push_back(changedFields(before, p->spec())); });
  r.update({spec("a", 1, PodRole::kBoth)});
  PodPtr a = r.snapshot()->find("a");
  r.update({spec("a", 1, PodRole::kPrefill)});
  EXPECT_EQ(r.snapshot()->find("a"), a);
  EXPECT_EQ(a->spec().role, PodRole::kPrefill);
  EXPECT_EQ(changed, std::vector<std::string>{"role"});
}

// Ensures a model is undecodable exactly when it has prefill pods and no decode or both pod, and the line names the
// model and its prefill pods.
TEST(PodRole, UndecodableModels) {
  EXPECT_TRUE(undecodableModels({}).empty());
  EXPECT_TRUE(undecodableModels({spec("p", 1, PodRole::kPrefill), spec("d", 2, PodRole::kDecode)}).empty());
  EXPECT_TRUE(undecodableModels({spec("p", 1, PodRole::kPrefill), spec("b", 2, PodRole::kBoth)}).empty());
  EXPECT_TRUE(undecodableModels({spec("d", 1, PodRole::kDecode)}).empty());  // decode only: nothing to hand over
  // m's decode pod serves another model only; n's prefill pod has a decode pod for n.
  auto lines = undecodableModels({spec("p-0", 1, PodRole::kPrefill, {"m", "n"}), spec("p-1", 2, PodRole::kPrefill),
                                  spec("d", 3, PodRole::kDecode, {"n"}), spec("x", 4, PodRole::kBoth, {"other"})});
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "model 'm': prefill pods p-0, p-1 but no pod with role decode or both (its requests could "
                      "never be decoded)");
}

// Ensures --check's reading of a pods file refuses a model with prefill pods and nothing to decode on, naming the
// file, and passes a file with a decode pod.
TEST(PodRole, CheckRefusesAnUndecodableModel) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("prefixgate-pod-role-" + std::to_string(::getpid()) + ".yaml")).string();
  auto write = [&path](const std::string& text) { std::ofstream(path, std::ios::binary) << text; };
  std::vector<std::string> problems;
  write("pods:\n  - {name: p, address: 127.0.0.1:1, models: [m], role: prefill}\n");
  checkPodsFile(path, problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], path + ": model 'm': prefill pods p but no pod with role decode or both (its requests "
                                "could never be decoded)");
  problems.clear();
  write("pods:\n  - {name: p, address: 127.0.0.1:1, models: [m], role: prefill}\n"
        "  - {name: d, address: 127.0.0.1:2, models: [m], role: decode}\n");
  checkPodsFile(path, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace prefixgate::discovery
