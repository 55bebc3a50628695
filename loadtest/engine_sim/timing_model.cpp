#include "engine_sim/timing_model.h"

#include <algorithm>
#include <cmath>

namespace prefixgate::sim {
namespace {

std::chrono::nanoseconds scaledMs(const TimingConfig& config, double ms) {
  double ns = ms * 1e6 * config.time_scale;
  if (!(ns > 0)) return std::chrono::nanoseconds{0};
  return std::chrono::nanoseconds{static_cast<int64_t>(std::llround(ns))};
}

}  // namespace

std::chrono::nanoseconds prefillDuration(const TimingConfig& config, uint64_t uncached_tokens) {
  double compute_ms = config.prefill_tokens_per_s > 0
                          ? 1000.0 * static_cast<double>(uncached_tokens) / config.prefill_tokens_per_s
                          : 0.0;
  return scaledMs(config, config.step_overhead_ms + compute_ms);
}

std::chrono::nanoseconds decodeStepDuration(const TimingConfig& config, size_t running_seqs) {
  return scaledMs(config,
                  config.decode_ms_per_token + config.decode_ms_per_running_seq * static_cast<double>(running_seqs));
}

SteadyTime PrefillLane::reserve(SteadyTime now, std::chrono::nanoseconds duration) {
  SteadyTime start = std::max(now, free_at_);
  free_at_ = start + duration;
  return free_at_;
}

}  // namespace prefixgate::sim
