#pragma once
// Every setting of the simulated vLLM engine pod, with the defaults of an 8B model on one H100-class GPU
// (see docs: shared/reference/vllm-interfaces.md). Filled by main.cpp from the command line.
#include <cstdint>
#include <string>
#include <vector>

#include "engine_sim/engine_dialect.h"
#include "engine_sim/kv_cache_model.h"
#include "engine_sim/scheduler.h"
#include "engine_sim/slot_scheduler.h"
#include "engine_sim/timing_model.h"

namespace prefixgate::sim {

struct SimConfig {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0 = the kernel picks a free port
  std::string name = "engine-sim";
  std::vector<std::string> models = {"sim-model"};

  // KV cache and prefix caching.
  uint64_t kv_capacity_tokens = 400000;
  uint32_t block_size = 16;
  // paged (vLLM's blocks, the default) | slots (llama-server's: max_num_seqs slots of kv_capacity_tokens /
  // max_num_seqs tokens each); kv_cache_model.h.
  std::string kv_cache_model = "paged";
  // slots only. llama-server's --slot-prompt-similarity: a slot is chosen by its common prefix with the prompt
  // when that prefix is more than this fraction of the prompt (0 = by recency only).
  double slot_prompt_similarity = 0.1;
  // slots only. llama-server's --cache-ram, in tokens: the host prompt cache's size (0 = off).
  uint64_t host_cache_tokens = 0;
  // slots only. Simulated time to copy 1,000 tokens of KV from the host cache back into a slot.
  double host_cache_restore_ms_per_1k_tokens = 0.5;
  // slots only. llama-server's --cache-idle-slots: after each assignment, idle slots are saved to the host cache.
  bool host_cache_idle_slots = true;

  // Timing model (simulated time; every delay is multiplied by time_scale before it is waited for). See
  // timing_model.h for the step time and docs/simulator.md for the sources.
  double prefill_tokens_per_s = 25000;
  double step_overhead_ms = 15;
  double decode_ms_per_token = 4.5;
  double decode_ms_per_running_seq = 0.046;
  double attention_ms_per_1k_context = 0.05;
  double prefill_attention_ms_per_m_pairs = 1.3;
  double context_attention_ms_per_m_pairs = -1;  // -1: as prefill_attention_ms_per_m_pairs
  double context_min_rows = 0;                    // 0: a thin prefill entry pays only its own pairs
  double time_scale = 1.0;
  // One token of the requests stands for 1/token_scale real tokens (rates, costs and the token budget follow).
  double token_scale = 1.0;

  // Scheduler limits.
  uint32_t max_num_seqs = 256;
  uint32_t max_num_batched_tokens = 8192;  // the step's token budget, in real tokens (x token_scale)
  uint32_t max_tokens_default = 16;
  uint32_t max_model_len = 32768;

  // HTTP limits (vLLM's server closes keep-alive connections idle for 5 s).
  uint32_t keep_alive_timeout_ms = 5000;
  uint32_t body_read_timeout_ms = 60000;
  uint32_t write_timeout_ms = 60000;
  uint64_t max_body_bytes = 64ull * 1024 * 1024;
  uint32_t max_header_bytes = 64 * 1024;

  // KV cache events (vLLM's ZMQ publisher): off unless kv_events is set ("tcp://*:5557"; port 0 = any free).
  std::string kv_events;
  std::string kv_replay;
  std::string kv_events_encoding = "array";  // array | map

  // The HTTP surface: vllm | sglang | llamacpp (engine_dialect.h).
  std::string engine_dialect = "vllm";
  // Close the connection after the last chunk of every streamed response, without saying so in its head (as
  // llama-server does). main.cpp turns it on by default for the llamacpp dialect.
  bool close_after_stream = false;

  // Prefill/decode disaggregation (vLLM's NixlConnector; docs/simulator.md, "Prefill/decode roles"). The role is
  // a label (GET /sim/info): every pod serves prefill legs, decode legs and aggregated requests alike, as a vLLM
  // pod with kv_role kv_both does. prefill | decode | both.
  std::string role = "both";
  // Simulated time a decode leg spends pulling 1,000 prompt tokens' KV from the prefill pod.
  double kv_transfer_ms_per_1k_tokens = 2.0;
  // NixlConnector's engine_id, returned as remote_engine_id by prefill legs ("" = the pod's name).
  std::string engine_id;

  // Processor sharing with the other pods mapping the same file (shared_cpu.h): "" = off (independent pods).
  std::string shared_cpu_file;
  // Slowdown while k pods of the file are busy, k = 1, 2, ... (the last entry extends by processor sharing).
  std::vector<double> shared_cpu_slowdown = {1.0};
  // Spend each step's time as CPU time on a compute thread instead of waiting it out (cpu_burner.h).
  bool burn_cpu = false;

  std::string log_level = "info";

  uint64_t capacityBlocks() const { return block_size == 0 ? 0 : kv_capacity_tokens / block_size; }
  SchedulerConfig schedulerConfig() const;
  SlotSchedulerConfig slotSchedulerConfig() const;
  TimingConfig timingConfig() const;
  // Each slot's context (llama-server's n_ctx per slot): the KV capacity split over max_num_seqs slots.
  uint64_t slotContextTokens() const { return max_num_seqs == 0 ? 0 : kv_capacity_tokens / max_num_seqs; }
  // The parsed kv_cache_model (paged when invalid: validateConfig refuses that).
  KvCacheModel kvCacheModel() const { return parseKvCacheModel(kv_cache_model).value_or(KvCacheModel::kPaged); }
  const std::string& servedModel() const { return models.front(); }
  const std::string& engineId() const { return engine_id.empty() ? name : engine_id; }
  // The parsed engine_dialect (vllm when invalid: validateConfig refuses that).
  EngineDialect dialect() const { return parseEngineDialect(engine_dialect).value_or(EngineDialect::kVllm); }
};

// Returns one line naming the first invalid setting ("--block-size: must be at least 1"), or "" when valid.
std::string validateConfig(const SimConfig& config);

}  // namespace prefixgate::sim
