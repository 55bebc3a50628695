#include <gtest/gtest.h>

#include "config/config.h"
#include "unit/problems.h"

namespace prefixgate::config {
namespace {

using testing::hasProblem;

const std::vector<std::string> kStrategies = {"least-request", "prefix-cache"};

// Ensures routing.max_scored_pods and routing.sampled_pods have their defaults, are read, and that a sample of 0
// or one larger than the threshold is refused by name (0 turns sampling off and is accepted).
TEST(SampledDecisionConfig, DefaultsValuesAndBounds) {
  Problems problems;
  Config d = parseYaml("discovery: {file: pods.yaml}\n", "gw.yaml", problems);
  EXPECT_EQ(d.routing.max_scored_pods, 64u);
  EXPECT_EQ(d.routing.sampled_pods, 8u);
  Config c = parseYaml("discovery: {file: pods.yaml}\nrouting: {max_scored_pods: 16, sampled_pods: 4}\n", "gw.yaml",
                       problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.routing.max_scored_pods, 16u);
  EXPECT_EQ(c.routing.sampled_pods, 4u);
  validate(c, kStrategies, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();

  c.routing.sampled_pods = 17;
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "routing.sampled_pods")) << (problems.empty() ? "" : problems.front());
  problems.clear();
  c.routing.sampled_pods = 0;
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "routing.sampled_pods"));
  problems.clear();
  c.routing.max_scored_pods = 0;  // off: any positive sample is fine
  c.routing.sampled_pods = 100;
  validate(c, kStrategies, problems);
  EXPECT_FALSE(hasProblem(problems, "routing.sampled_pods"));
  EXPECT_FALSE(hasProblem(problems, "routing.max_scored_pods"));
}

}  // namespace
}  // namespace prefixgate::config
