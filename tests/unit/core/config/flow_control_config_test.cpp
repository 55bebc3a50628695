// The flow_control section: parsed (its list of classes included), defaulted and checked, with problems naming the
// file and the key.
#include <gtest/gtest.h>

#include "config/config.h"
#include "unit/problems.h"

namespace prefixgate::config {
namespace {

using testing::hasProblem;

const std::vector<std::string> kStrategies = {"least-request", "prefix-cache"};

// Ensures flow control is off by default, and that every key, the classes list included, is read from a file.
TEST(FlowControlConfig, DefaultsAndValuesAreRead) {
  Problems problems;
  Config d = parseYaml("discovery: {file: pods.yaml}\n", "gw.yaml", problems);
  EXPECT_FALSE(d.flow_control.enabled);
  EXPECT_EQ(d.flow_control.tenant_header, "x-tenant-id");
  EXPECT_TRUE(d.flow_control.classes.empty());
  Config c = parseYaml(
      "discovery: {file: pods.yaml}\n"
      "flow_control:\n"
      "  enabled: true\n"
      "  tenant_header: x-team\n"
      "  classes: [{name: interactive, ttft_slo_ms: 2000, max_wait_ms: 500}, {name: batch}]\n"
      "  default_class: batch\n"
      "  max_queued_per_tenant: 7\n"
      "  max_in_flight_per_pod: 3\n"
      "  max_engine_waiting: 4\n"
      "  output_token_weight: 1.5\n",
      "gw.yaml", problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  const flow::FlowConfig& f = c.flow_control;
  EXPECT_TRUE(f.enabled);
  EXPECT_EQ(f.tenant_header, "x-team");
  ASSERT_EQ(f.classes.size(), 2u);
  EXPECT_EQ(f.classes[0].name, "interactive");
  EXPECT_EQ(f.classes[0].ttft_slo_ms, 2000u);
  EXPECT_EQ(f.classes[0].max_wait_ms, 500u);
  EXPECT_EQ(f.classes[1].max_wait_ms, 30000u);  // its default
  EXPECT_EQ(f.default_class, "batch");
  EXPECT_EQ(f.max_queued_per_tenant, 7u);
  EXPECT_EQ(f.max_in_flight_per_pod, 3u);
  EXPECT_EQ(f.max_engine_waiting, 4u);
  EXPECT_DOUBLE_EQ(f.output_token_weight, 1.5);
  validate(c, kStrategies, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

// Ensures a classes value that is not a list, an unknown key in a class, and a bad number each name their key.
TEST(FlowControlConfig, BadValuesNameTheFileAndKey) {
  Problems problems;
  parseYaml("flow_control: {classes: {name: a}}\n", "/etc/gw.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "/etc/gw.yaml: flow_control.classes: expected a list")) << problems.front();
  problems.clear();
  parseYaml("flow_control: {classes: [{name: a, colour: red}], max_tenants: many}\n", "/etc/gw.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "/etc/gw.yaml: flow_control.classes[0].colour: unknown key"));
  EXPECT_TRUE(hasProblem(problems, "/etc/gw.yaml: flow_control.max_tenants: expected a non-negative whole number"));
  EXPECT_EQ(problems.size(), 2u);
}

// Ensures an enabled flow control is checked: its classes (validateFlowConfig, naming the key) and a pod's room,
// which needs flow_control.max_in_flight_per_pod or limits.max_in_flight_per_pod; a disabled one is not checked.
TEST(FlowControlConfig, EnabledNeedsARoomAndValidClasses) {
  Problems problems;
  Config c = parseYaml("discovery: {file: pods.yaml}\nflow_control: {enabled: true}\n", "gw.yaml", problems);
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: flow_control.max_in_flight_per_pod: flow control needs a pod's room"));
  problems.clear();
  c = parseYaml("discovery: {file: pods.yaml}\nlimits: {max_in_flight_per_pod: 8}\n"
                "flow_control: {enabled: true, classes: [{name: a}, {name: a}]}\n",
                "gw.yaml", problems);
  validate(c, kStrategies, problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: flow_control.classes[1].name: 'a' is already class 0"));
  problems.clear();
  c = parseYaml("discovery: {file: pods.yaml}\nflow_control: {classes: [{name: a}, {name: a}]}\n", "gw.yaml",
                problems);
  validate(c, kStrategies, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

}  // namespace
}  // namespace prefixgate::config
