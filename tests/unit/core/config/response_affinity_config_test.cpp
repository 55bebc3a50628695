#include <gtest/gtest.h>

#include "config/config.h"
#include "unit/problems.h"

namespace prefixgate::config {
namespace {

using testing::hasProblem;

const std::vector<std::string> kStrategies = {"least-request", "prefix-cache"};

// Ensures routing.response_affinity's keys have their defaults, are read, and a zero TTL is refused by name.
TEST(ResponseAffinityConfig, DefaultsValuesAndZeroTtl) {
  Problems problems;
  Config d = parseYaml("discovery: {file: pods.yaml}\n", "gw.yaml", problems);
  EXPECT_EQ(d.routing.response_affinity.max_entries, 100000u);
  EXPECT_EQ(d.routing.response_affinity.ttl_ms, 3600000u);
  Config c = parseYaml("discovery: {file: pods.yaml}\nrouting: {response_affinity: {max_entries: 5, ttl_ms: 0}}\n",
                       "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.routing.response_affinity.max_entries, 5u);
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "routing.response_affinity.ttl_ms")) << (problems.empty() ? "" : problems.front());
}

}  // namespace
}  // namespace prefixgate::config
