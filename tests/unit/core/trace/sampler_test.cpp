// trace::shouldSample: a client's sampled flag is obeyed whatever the ratio; a trace the gateway starts is sampled
// by the ratio, decided by its trace id alone (so every replica agrees).
#include "trace/sampler.h"

#include <gtest/gtest.h>

#include <string>

#include "trace/ids.h"

namespace prefixgate::trace {
namespace {

const std::string kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";

std::optional<util::TraceParent> parent(const char* flags) {
  return util::parseTraceparent("00-" + kTrace + "-00f067aa0ba902b7-" + flags);
}

TEST(Sampler, ObeysTheParentsFlagWhateverTheRatio) {
  for (double ratio : {0.0, 0.5, 1.0}) {
    EXPECT_TRUE(shouldSample(parent("01"), kTrace, ratio)) << ratio;
    EXPECT_FALSE(shouldSample(parent("00"), kTrace, ratio)) << ratio;
  }
}

TEST(Sampler, WithoutAParentRatioZeroNeverAndOneAlways) {
  seedIds(7);
  for (int i = 0; i < 200; ++i) {
    const TraceIdText id = newTraceId();
    EXPECT_FALSE(shouldSample(std::nullopt, view(id), 0.0));
    EXPECT_TRUE(shouldSample(std::nullopt, view(id), 1.0));
  }
}

// The decision is the trace id's: the same id decides the same way every time, the boundary follows the id's last
// 8 bytes (as OpenTelemetry's TraceIdRatioBased reads them), and about `ratio` of random ids are sampled.
TEST(Sampler, RatioDecidesByTraceIdDeterministically) {
  // Last 8 bytes 0x00..: (x >> 1) = 0 < anything positive.
  EXPECT_TRUE(sampledByRatio("ffffffffffffffff0000000000000001", 0.001));
  // Last 8 bytes all ones: (x >> 1) = 2^63 - 1, sampled only at ratio 1.
  EXPECT_FALSE(sampledByRatio("0000000000000000ffffffffffffffff", 0.999));
  EXPECT_TRUE(sampledByRatio("0000000000000000ffffffffffffffff", 1.0));
  // Half: below 0x8000.. sampled, at or above not.
  EXPECT_TRUE(sampledByRatio("00000000000000007ffffffffffffffe", 0.5));
  EXPECT_FALSE(sampledByRatio("00000000000000008000000000000000", 0.5));
  seedIds(11);
  int sampled = 0;
  constexpr int kTraces = 4000;
  for (int i = 0; i < kTraces; ++i) {
    const TraceIdText id = newTraceId();
    const bool first = sampledByRatio(view(id), 0.25);
    EXPECT_EQ(first, sampledByRatio(view(id), 0.25));
    sampled += first;
  }
  EXPECT_NEAR(sampled, kTraces / 4, kTraces / 20);
}

TEST(Ids, AreLowercaseHexOfTheRightLengthAndDiffer) {
  seedIds(1);
  const TraceIdText a = newTraceId(), b = newTraceId();
  const SpanIdText s = newSpanId();
  EXPECT_NE(view(a), view(b));
  for (char c : std::string(view(a)) + std::string(view(s)))
    EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << c;
  EXPECT_NE(view(s), "0000000000000000");
}

}  // namespace
}  // namespace prefixgate::trace
