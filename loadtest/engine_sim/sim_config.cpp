#include "engine_sim/sim_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "engine_sim/kv_events.h"

namespace prefixgate::sim {

SchedulerConfig SimConfig::schedulerConfig() const {
  auto budget = static_cast<uint32_t>(std::max(1.0, std::round(max_num_batched_tokens * token_scale)));
  return SchedulerConfig{capacityBlocks(), block_size, max_num_seqs, budget};
}

SlotSchedulerConfig SimConfig::slotSchedulerConfig() const {
  SlotTableConfig table{max_num_seqs, static_cast<float>(slot_prompt_similarity), host_cache_tokens,
                        host_cache_idle_slots};
  return SlotSchedulerConfig{table, slotContextTokens(), schedulerConfig().max_num_batched_tokens, block_size};
}

TimingConfig SimConfig::timingConfig() const {
  return TimingConfig{prefill_tokens_per_s,        step_overhead_ms,
                      decode_ms_per_token,         decode_ms_per_running_seq,
                      attention_ms_per_1k_context, prefill_attention_ms_per_m_pairs,
                      token_scale,                 time_scale,
                      host_cache_restore_ms_per_1k_tokens, kv_transfer_ms_per_1k_tokens,
                      context_attention_ms_per_m_pairs, context_min_rows};
}

namespace {

std::string validateKvCacheModel(const SimConfig& config) {
  auto model = parseKvCacheModel(config.kv_cache_model);
  if (!model) return fmt::format("--kv-cache-model: '{}' is not paged or slots", config.kv_cache_model);
  if (!(config.slot_prompt_similarity >= 0 && config.slot_prompt_similarity <= 1))
    return "--slot-prompt-similarity: must be in [0, 1]";
  if (!(config.host_cache_restore_ms_per_1k_tokens >= 0))
    return "--host-cache-restore-ms-per-1k-tokens: must not be negative";
  if (*model == KvCacheModel::kPaged) {
    if (config.host_cache_tokens != 0) return "--host-cache-tokens: needs --kv-cache-model slots";
    return "";
  }
  if (config.slotContextTokens() < 2)
    return fmt::format("--kv-capacity-tokens: {} split over {} slots (--max-num-seqs) leaves under 2 tokens a slot",
                       config.kv_capacity_tokens, config.max_num_seqs);
  if (!config.kv_events.empty())
    return "--kv-events: --kv-cache-model slots publishes no KV events (llama-server has none)";
  return "";
}

// The hand-off is vLLM's NixlConnector over paged KV blocks: a pod meant for one leg must be able to serve it.
std::string validateRole(const SimConfig& config) {
  if (config.role != "prefill" && config.role != "decode" && config.role != "both")
    return fmt::format("--role: '{}' is not prefill, decode or both", config.role);
  if (!(config.kv_transfer_ms_per_1k_tokens >= 0)) return "--kv-transfer-ms-per-1k-tokens: must not be negative";
  if (config.role == "both") return "";
  if (config.kvCacheModel() != KvCacheModel::kPaged)
    return fmt::format("--role {}: needs --kv-cache-model paged (the KV hand-off moves paged KV blocks)", config.role);
  if (config.dialect() != EngineDialect::kVllm)
    return fmt::format("--role {}: needs --engine-dialect vllm (the hand-off is vLLM's NixlConnector)", config.role);
  return "";
}

}  // namespace

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
  if (!(config.attention_ms_per_1k_context >= 0)) return "--attention-ms-per-1k-context: must not be negative";
  if (!(config.prefill_attention_ms_per_m_pairs >= 0))
    return "--prefill-attention-ms-per-m-pairs: must not be negative";
  if (!(config.context_attention_ms_per_m_pairs >= 0 || config.context_attention_ms_per_m_pairs == -1))
    return "--context-attention-ms-per-m-pairs: must not be negative (or -1: as --prefill-attention-ms-per-m-pairs)";
  if (!(config.context_min_rows >= 0 && config.context_min_rows <= 1e6))
    return "--context-min-rows: must be between 0 (off) and 1e6";
  if (!(config.time_scale >= 0)) return "--time-scale: must not be negative";
  if (!(config.token_scale > 0 && config.token_scale <= 1)) return "--token-scale: must be in (0, 1]";
  if (config.max_num_batched_tokens == 0) return "--max-num-batched-tokens: must be at least 1";
  if (config.max_num_seqs == 0) return "--max-num-seqs: must be at least 1";
  if (config.max_tokens_default == 0) return "--max-tokens-default: must be at least 1";
  if (config.max_model_len < 2) return "--max-model-len: must be at least 2";
  if (config.keep_alive_timeout_ms == 0) return "--keep-alive-timeout-ms: must be at least 1";
  if (!parseKvEventEncoding(config.kv_events_encoding))
    return fmt::format("--kv-events-encoding: '{}' is not array or map", config.kv_events_encoding);
  if (!config.kv_replay.empty() && config.kv_events.empty()) return "--kv-replay: needs --kv-events";
  if (!parseEngineDialect(config.engine_dialect))
    return fmt::format("--engine-dialect: '{}' is not vllm, sglang or llamacpp", config.engine_dialect);
  if (std::string error = validateKvCacheModel(config); !error.empty()) return error;
  if (config.shared_cpu_slowdown.empty()) return "--shared-cpu-slowdown: needs at least one value";
  for (double slowdown : config.shared_cpu_slowdown)
    if (!(slowdown > 0 && slowdown < 1e6)) return fmt::format("--shared-cpu-slowdown: {} is not a positive factor", slowdown);
  if (config.burn_cpu && !config.shared_cpu_file.empty())
    return "--burn-cpu: the pods share the machine's CPU for real; leave out --shared-cpu";
  if (config.burn_cpu && !(config.time_scale > 0)) return "--burn-cpu: needs a --time-scale above 0";
  return validateRole(config);
}

}  // namespace prefixgate::sim
