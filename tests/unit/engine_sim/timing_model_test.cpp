#include "engine_sim/timing_model.h"

#include <gtest/gtest.h>

namespace prefixgate::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

TimingConfig config(double time_scale = 1.0) {
  return TimingConfig{/*prefill_tokens_per_s=*/25000, /*step_overhead_ms=*/15, /*decode_ms_per_token=*/4.5,
                      /*decode_ms_per_running_seq=*/0.046, time_scale};
}

// Ensures prefill costs the step overhead plus time proportional to the uncached tokens only.
TEST(TimingModel, PrefillProportionalToUncachedTokens) {
  EXPECT_EQ(prefillDuration(config(), 0), milliseconds(15));
  EXPECT_EQ(prefillDuration(config(), 25000), milliseconds(1015));
  EXPECT_EQ(prefillDuration(config(), 2500), milliseconds(115));
  EXPECT_LT(prefillDuration(config(), 1), prefillDuration(config(), 10000));  // a cache hit is much cheaper
}

// Ensures each decode step grows with the number of running sequences.
TEST(TimingModel, DecodeGrowsWithRunningSequences) {
  EXPECT_EQ(decodeStepDuration(config(), 0), nanoseconds(4500000));
  EXPECT_EQ(decodeStepDuration(config(), 100), nanoseconds(9100000));
  EXPECT_LT(decodeStepDuration(config(), 1), decodeStepDuration(config(), 2));
}

// Ensures every delay is multiplied by the time scale (0.1 = ten times faster, 0 = no delay).
TEST(TimingModel, TimeScaleMultipliesDelays) {
  EXPECT_EQ(prefillDuration(config(0.1), 25000), nanoseconds(101500000));
  EXPECT_EQ(decodeStepDuration(config(0.1), 100), nanoseconds(910000));
  EXPECT_EQ(prefillDuration(config(0), 25000), nanoseconds(0));
  EXPECT_EQ(decodeStepDuration(config(2), 0), milliseconds(9));
}

// Ensures prefills share one FIFO lane: a prefill booked while another runs starts after it.
TEST(TimingModel, PrefillLaneSerializes) {
  PrefillLane lane;
  SteadyTime t0 = SteadyTime{} + std::chrono::seconds(100);
  EXPECT_EQ(lane.reserve(t0, milliseconds(40)), t0 + milliseconds(40));
  EXPECT_EQ(lane.reserve(t0 + milliseconds(10), milliseconds(20)), t0 + milliseconds(60));
  EXPECT_EQ(lane.freeAt(), t0 + milliseconds(60));
  // An idle lane starts at once.
  EXPECT_EQ(lane.reserve(t0 + milliseconds(500), milliseconds(5)), t0 + milliseconds(505));
}

}  // namespace
}  // namespace prefixgate::sim
