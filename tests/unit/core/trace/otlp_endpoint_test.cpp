// trace::parseOtlpEndpoint: http://HOST[:PORT][/PATH] with OTLP's default path, and clear refusals (https first).
#include "trace/otlp_endpoint.h"

#include <gtest/gtest.h>

namespace prefixgate::trace {
namespace {

TEST(OtlpEndpoint, ParsesHostPortAndPath) {
  OtlpEndpoint e;
  std::string error;
  ASSERT_TRUE(parseOtlpEndpoint("http://127.0.0.1:4318/v1/traces", e, error)) << error;
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 4318);
  EXPECT_EQ(e.target, "/v1/traces");
  ASSERT_TRUE(parseOtlpEndpoint("http://collector.observability", e, error)) << error;
  EXPECT_EQ(e.host, "collector.observability");
  EXPECT_EQ(e.port, 80);
  EXPECT_EQ(e.target, "/v1/traces");  // OTLP/HTTP's path for traces
  ASSERT_TRUE(parseOtlpEndpoint("http://[::1]:4318/otlp/v1/traces", e, error)) << error;
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 4318);
  EXPECT_EQ(e.target, "/otlp/v1/traces");
}

TEST(OtlpEndpoint, RefusesHttpsAndMalformedUrls) {
  OtlpEndpoint e;
  std::string error;
  EXPECT_FALSE(parseOtlpEndpoint("https://collector:4318/v1/traces", e, error));
  EXPECT_NE(error.find("https is not supported"), std::string::npos) << error;
  for (const char* bad : {"collector:4318", "http://", "http://:4318/v1/traces", "http://h:0/", "http://h:65536/",
                          "http://h:12x/", "http://h:/", "http://[::1/", "grpc://h:4317"}) {
    error.clear();
    EXPECT_FALSE(parseOtlpEndpoint(bad, e, error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

}  // namespace
}  // namespace prefixgate::trace
