#include "engine_sim/sim_config.h"

#include <fmt/format.h>

namespace prefixgate::sim {

std::string validateConfig(const SimConfig& config) {
  if (config.models.empty()) return "--model: at least one model is required";
  for (const auto& model : config.models)
    if (model.empty()) return "--model: a model name must not be empty";
  if (config.name.empty()) return "--name: must not be empty";
  if (config.block_size == 0) return "--block-size: must be at least 1";
  if (config.capacityBlocks() == 0)
    return fmt::format("--kv-capacity-tokens: {} holds no block of {} tokens", config.kv_capacity_tokens,
                       config.block_size);
  if (!(config.prefill_tokens_per_s > 0)) return "--prefill-tokens-per-s: must be greater than 0";
  if (!(config.step_overhead_ms >= 0)) return "--step-overhead-ms: must not be negative";
  if (!(config.decode_ms_per_token >= 0)) return "--decode-ms-per-token: must not be negative";
  if (!(config.decode_ms_per_running_seq >= 0)) return "--decode-ms-per-running-seq: must not be negative";
  if (!(config.time_scale >= 0)) return "--time-scale: must not be negative";
  if (config.max_num_seqs == 0) return "--max-num-seqs: must be at least 1";
  if (config.max_tokens_default == 0) return "--max-tokens-default: must be at least 1";
  if (config.max_model_len < 2) return "--max-model-len: must be at least 2";
  if (config.keep_alive_timeout_ms == 0) return "--keep-alive-timeout-ms: must be at least 1";
  return "";
}

}  // namespace prefixgate::sim
