// The tracing section: read with its defaults (off), and every bad value refused at start naming its key (https
// with the reason: the exporter has no TLS client).
#include <gtest/gtest.h>

#include "config/config.h"

namespace prefixgate::config {
namespace {

Problems problemsOf(const std::string& tracing_yaml) {
  Problems problems;
  Config c = parseYaml("discovery: {file: pods.yaml}\ntracing: " + tracing_yaml + "\n", "/etc/pg/gw.yaml", problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  validate(c, {"least-request", "prefix-cache"}, problems);
  return problems;
}

TEST(TracingConfig, DefaultsAreOffWithTheContractsRatio) {
  Problems problems;
  const Config c = parseYaml("discovery: {file: pods.yaml}\n", "/etc/pg/gw.yaml", problems);
  EXPECT_FALSE(c.tracing.enabled());
  EXPECT_EQ(c.tracing.sample_ratio, 1.0);
  EXPECT_EQ(c.tracing.service_name, "prefixgate");
  EXPECT_EQ(c.tracing.export_delay_ms, 2000u);
  EXPECT_TRUE(problemsOf("{otlp_endpoint: 'http://127.0.0.1:4318/v1/traces', sample_ratio: 0.25}").empty());
}

TEST(TracingConfig, BadValuesNameTheirKey) {
  const auto only = [](const Problems& p, const std::string& text) {
    ASSERT_EQ(p.size(), 1u) << (p.empty() ? "" : p.front());
    EXPECT_NE(p[0].find(text), std::string::npos) << p[0];
  };
  only(problemsOf("{otlp_endpoint: 'https://collector:4318/v1/traces'}"),
       "/etc/pg/gw.yaml: tracing.otlp_endpoint: https is not supported");
  only(problemsOf("{otlp_endpoint: 'collector:4318'}"), "tracing.otlp_endpoint: expected http://HOST:PORT/PATH");
  only(problemsOf("{sample_ratio: 1.5}"), "tracing.sample_ratio: must be in [0, 1]");
  only(problemsOf("{sample_ratio: -0.1}"), "tracing.sample_ratio: must be in [0, 1]");
  const Problems none_queued = problemsOf("{max_queued_spans: 0}");  // and the batch is then over it
  ASSERT_FALSE(none_queued.empty());
  EXPECT_NE(none_queued[0].find("tracing.max_queued_spans: must be greater than 0"), std::string::npos);
  only(problemsOf("{max_batch_spans: 0}"), "tracing.max_batch_spans: must be greater than 0");
  only(problemsOf("{max_queued_spans: 10, max_batch_spans: 20}"), "tracing.max_batch_spans: must be at most");
  only(problemsOf("{export_delay_ms: 0}"), "tracing.export_delay_ms: must be greater than 0");
  only(problemsOf("{export_timeout_ms: 0}"), "tracing.export_timeout_ms: must be greater than 0");
  only(problemsOf("{service_name: ''}"), "tracing.service_name: must not be empty");
}

}  // namespace
}  // namespace prefixgate::config
