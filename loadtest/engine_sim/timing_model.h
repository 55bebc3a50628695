#pragma once
// How long the simulated GPU takes (pure: no clocks; the caller passes "now"). Durations come back already
// multiplied by the time scale, ready to be waited for.
//   prefill of one sequence = step overhead + uncached prompt tokens / prefill rate
//   one decode step (one output token) = decode_ms_per_token + decode_ms_per_running_seq x running sequences
#include <chrono>
#include <cstdint>

#include "prefixgate/types.h"

namespace prefixgate::sim {

struct TimingConfig {
  double prefill_tokens_per_s = 25000;
  double step_overhead_ms = 15;
  double decode_ms_per_token = 4.5;
  double decode_ms_per_running_seq = 0.046;
  double time_scale = 1.0;  // 0.1 = ten times faster than real time
};

// The scaled time to prefill uncached_tokens prompt tokens.
std::chrono::nanoseconds prefillDuration(const TimingConfig& config, uint64_t uncached_tokens);

// The scaled time of one decode step while running_seqs sequences run.
std::chrono::nanoseconds decodeStepDuration(const TimingConfig& config, size_t running_seqs);

// The GPU's compute is shared: prefills run one after another, in the order they were reserved.
class PrefillLane {
 public:
  // Books a prefill of the given (scaled) duration that starts when the lane is free, not before now; returns
  // when it ends.
  SteadyTime reserve(SteadyTime now, std::chrono::nanoseconds duration);
  // When the last booked prefill ends.
  SteadyTime freeAt() const { return free_at_; }

 private:
  SteadyTime free_at_{};
};

}  // namespace prefixgate::sim
