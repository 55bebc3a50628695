// log_format: text by default, json accepted, anything else refused naming the file, the key and the value.
#include <gtest/gtest.h>

#include "config/config.h"
#include "unit/problems.h"

namespace prefixgate::config {
namespace {

const std::vector<std::string> kStrategies = {"least-request", "prefix-cache", "random"};
using testing::hasProblem;

TEST(LogFormatConfig, DefaultsToTextAndAcceptsJson) {
  Problems problems;
  Config c = parseYaml("discovery: {file: p.yaml}\n", "gw.yaml", problems);
  EXPECT_EQ(c.log_format, "text");
  c = parseYaml("log_format: json\ndiscovery: {file: p.yaml}\n", "gw.yaml", problems);
  EXPECT_EQ(c.log_format, "json");
  validate(c, kStrategies, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST(LogFormatConfig, AnUnknownFormatNamesFileKeyAndValue) {
  Problems problems;
  Config c = parseYaml("log_format: JSON\ndiscovery: {file: p.yaml}\n", "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  validate(c, kStrategies, problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: log_format: expected text or json, got 'JSON'"));
}

}  // namespace
}  // namespace prefixgate::config
