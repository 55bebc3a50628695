// util::traceIdFromTraceparent: the trace id of a valid W3C traceparent, and nothing from any malformed one.
#include "util/traceparent.h"

#include <gtest/gtest.h>

#include <string>

namespace prefixgate::util {
namespace {

constexpr const char* kValid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(Traceparent, ReadsTheTraceIdOfAValidHeader) {
  EXPECT_EQ(traceIdFromTraceparent(kValid), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(traceIdFromTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(Traceparent, RefusesWrongShapes) {
  EXPECT_EQ(traceIdFromTraceparent(""), "");
  EXPECT_EQ(traceIdFromTraceparent("garbage"), "");
  EXPECT_EQ(traceIdFromTraceparent(std::string(kValid).substr(0, 54)), "");            // short
  EXPECT_EQ(traceIdFromTraceparent(std::string(kValid) + "-extra"), "");               // version 00 is exact
  EXPECT_EQ(traceIdFromTraceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "");  // upper case
  EXPECT_EQ(traceIdFromTraceparent("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "");  // separator
  EXPECT_EQ(traceIdFromTraceparent("00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"), "");  // not hex
  EXPECT_EQ(traceIdFromTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x"), "");  // flags
  EXPECT_EQ(traceIdFromTraceparent(" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0"), "");
}

TEST(Traceparent, RefusesAllZeroIdsAndVersionFf) {
  EXPECT_EQ(traceIdFromTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "");
  EXPECT_EQ(traceIdFromTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"), "");
  EXPECT_EQ(traceIdFromTraceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "");
}

// A later version is read as version 00 (its first 55 characters), with more fields after a dash allowed.
TEST(Traceparent, ReadsALaterVersionAsVersion00) {
  EXPECT_EQ(traceIdFromTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(traceIdFromTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(traceIdFromTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"), "");
}

}  // namespace
}  // namespace prefixgate::util
