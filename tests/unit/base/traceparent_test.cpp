// util::traceIdFromTraceparent and parseTraceparent: the fields of a valid W3C traceparent, and nothing from any
// malformed one; formatTraceparent writes what they read.
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

// The parsed fields are the header's, and the sampled flag is bit 0 of the flags.
TEST(Traceparent, ParsesEveryField) {
  const std::optional<TraceParent> parsed = parseTraceparent(kValid);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->traceId(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(parsed->parentId(), "00f067aa0ba902b7");
  EXPECT_EQ(parsed->flags, 0x01);
  EXPECT_TRUE(parsed->sampled());
  const auto unsampled = parseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe");
  ASSERT_TRUE(unsampled);
  EXPECT_EQ(unsampled->flags, 0xfe);  // other bits kept, to be passed on
  EXPECT_FALSE(unsampled->sampled());
}

// Whatever traceIdFromTraceparent refuses, parseTraceparent refuses too.
TEST(Traceparent, ParseRefusesWhatIsInvalid) {
  for (const char* bad : {"", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                          "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                          "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"})
    EXPECT_FALSE(parseTraceparent(bad)) << bad;
}

// Formatting what was parsed gives the header back; a later version is written as version 00.
TEST(Traceparent, FormatRoundTrips) {
  const auto parsed = parseTraceparent(kValid);
  ASSERT_TRUE(parsed);
  const TraceparentText text = formatTraceparent(parsed->traceId(), parsed->parentId(), parsed->flags);
  EXPECT_EQ(std::string(text.data(), text.size()), kValid);
  const auto later = parseTraceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-more");
  ASSERT_TRUE(later);
  const TraceparentText again = formatTraceparent(later->traceId(), "b7ad6b7169203331", later->flags);
  EXPECT_EQ(std::string(again.data(), again.size()), "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-03");
  EXPECT_EQ(traceIdFromTraceparent(std::string_view(again.data(), again.size())), "4bf92f3577b34da6a3ce929d0e0e4736");
}

}  // namespace
}  // namespace prefixgate::util
