#include "engine_sim/timing_model.h"

#include <cmath>

namespace prefixgate::sim {

StepWork stepWork(const StepPlan& plan, double context_min_rows) {
  StepWork work;
  work.sequences = static_cast<uint32_t>(plan.entries.size());
  work.restored_tokens = plan.restored_tokens;
  for (const StepEntry& entry : plan.entries) {
    // One token computed is a decode row whatever it is for: vLLM runs a step whose every entry schedules one
    // token (a decode leg's last prompt token after its KV was pulled included) as a uniform decode batch
    // (gpu_model_runner.py: max_query_len == 1), in the decode CUDA graph, without a prefill step's overhead.
    if (entry.decode || entry.new_tokens == 1) {
      work.decode_context += entry.computed_before + entry.new_tokens;
      continue;
    }
    work.prefill_tokens += entry.new_tokens;
    double fresh = entry.new_tokens;
    work.prefill_pairs += fresh * (static_cast<double>(entry.computed_before) + (fresh + 1) / 2);
    work.context_pairs += fresh * static_cast<double>(entry.computed_before);
    if (fresh < context_min_rows)
      work.padding_pairs += (context_min_rows - fresh) * static_cast<double>(entry.computed_before);
  }
  return work;
}

double stepMilliseconds(const TimingConfig& config, const StepWork& work) {
  const double k = config.token_scale > 0 ? config.token_scale : 1.0;
  double ms = (config.decode_ms_per_token + config.decode_ms_per_running_seq * work.sequences) / k;
  if (work.prefill_tokens > 0) {
    ms += config.step_overhead_ms;
    if (config.prefill_tokens_per_s > 0)
      ms += 1000.0 * static_cast<double>(work.prefill_tokens) / (config.prefill_tokens_per_s * k);
  }
  ms += config.attention_ms_per_1k_context * static_cast<double>(work.decode_context) / 1000.0 / (k * k);
  if (config.context_attention_ms_per_m_pairs >= 0) {
    ms += (config.prefill_attention_ms_per_m_pairs * (work.prefill_pairs - work.context_pairs) +
           config.context_attention_ms_per_m_pairs * (work.context_pairs + work.padding_pairs)) /
          1e6 / (k * k);
  } else {
    ms += config.prefill_attention_ms_per_m_pairs * (work.prefill_pairs + work.padding_pairs) / 1e6 / (k * k);
  }
  // A restored token stands for 1/k real ones too.
  if (work.restored_tokens > 0)
    ms += config.host_cache_restore_ms_per_1k_tokens * static_cast<double>(work.restored_tokens) / 1000.0 / k;
  return ms;
}

std::chrono::nanoseconds stepDuration(const TimingConfig& config, const StepWork& work) {
  return scaledDuration(config, stepMilliseconds(config, work));
}

double kvTransferMilliseconds(const TimingConfig& config, uint64_t tokens) {
  const double k = config.token_scale > 0 ? config.token_scale : 1.0;
  return config.kv_transfer_ms_per_1k_tokens * static_cast<double>(tokens) / 1000.0 / k;
}

std::chrono::nanoseconds scaledDuration(const TimingConfig& config, double simulated_ms) {
  double ns = simulated_ms * 1e6 * config.time_scale;
  if (!(ns > 0)) return std::chrono::nanoseconds{0};
  return std::chrono::nanoseconds{static_cast<int64_t>(std::llround(ns))};
}

}  // namespace prefixgate::sim
