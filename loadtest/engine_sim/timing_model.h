#pragma once
// How long one engine step takes on the simulated GPU (pure: no clocks). A step computes a batch of tokens for
// several sequences at once; its time is the sum of
//   decode_ms_per_token                      one pass over the weights (memory bound: the floor of every step)
//   decode_ms_per_running_seq x sequences    per-sequence work in the batch (sampling, bookkeeping)
//   step_overhead_ms                         only in a step that prefills: the extra cost of a mixed batch
//                                            (an entry computing one token counts as a decode, as in vLLM)
//   prefill tokens / prefill_tokens_per_s    the linear layers over the prompt tokens computed (compute bound)
//   attention_ms_per_1k_context x decode context / 1000
//                                            decoding sequences read the KV of their whole context
//   prefill_attention_ms_per_m_pairs x (new x context) pairs / 1e6
//                                            prefill chunks attend every new token to everything before it;
//   context_attention_ms_per_m_pairs         when set (>= 0), the pairs of new tokens with tokens computed before
//                                            the step (a cached prefix, earlier chunks) cost this instead: a short
//                                            prompt after a long cached prefix computes them in a thin batch,
//                                            less efficiently per pair than a long prompt's own (llama.cpp on CPU)
//   context_min_rows                         when > 0, a prefill entry with fewer new tokens than this attends to
//                                            its context as if it had this many (the padding pairs cost as context
//                                            pairs): a thin batch reads the cached keys and values at the cost of a
//                                            wider one, so its time is flat in its new tokens below the width and
//                                            per pair above it (a long turn after a cached system prompt)
//   host_cache_restore_ms_per_1k_tokens x restored tokens / 1000
//                                            slots model: KV copied back from the host prompt cache first
// The constants and their sources are in docs/simulator.md.
//
// Token scale k (--token-scale): a workload may send k times fewer tokens than the engine it stands for (one
// token = 1/k real tokens, k <= 1). To keep every duration, per-token rates and costs are scaled here: prefill
// rate x k, per-step decode costs / k (k times fewer steps), attention costs / k^2 (k times fewer tokens in
// k times fewer steps). The step overhead is not scaled: a prompt needs as many prefill steps either way, since
// the token budget is scaled too (see SimConfig::schedulerConfig).
#include <chrono>
#include <cstdint>

#include "engine_sim/step_scheduler.h"

namespace prefixgate::sim {

struct TimingConfig {
  double prefill_tokens_per_s = 25000;
  double step_overhead_ms = 15;
  double decode_ms_per_token = 4.5;
  double decode_ms_per_running_seq = 0.046;
  double attention_ms_per_1k_context = 0.05;
  double prefill_attention_ms_per_m_pairs = 1.3;
  double token_scale = 1.0;
  double time_scale = 1.0;  // 0.1 = ten times faster than real time
  // Slots model: copying restored tokens' KV from the host prompt cache into a slot, before the step.
  double host_cache_restore_ms_per_1k_tokens = 0.5;
  // Decode legs (prefill/decode hand-off): pulling prompt KV from the prefill pod, while the sequence waits.
  double kv_transfer_ms_per_1k_tokens = 2.0;
  // Pairs of new tokens with the context computed before the step; negative: as prefill_attention_ms_per_m_pairs.
  double context_attention_ms_per_m_pairs = -1;
  // A prefill entry attends to its context as if it computed at least this many new tokens; 0: off.
  double context_min_rows = 0;
};

// What a step computes, as far as its time is concerned.
struct StepWork {
  uint32_t sequences = 0;
  uint64_t prefill_tokens = 0;   // new tokens of prefill entries (prompt chunks and recomputation)
  uint64_t decode_context = 0;   // sum over decode entries of their context (computed tokens + the new one)
  double prefill_pairs = 0;      // sum over prefill entries of new x (computed before + (new + 1) / 2)
  uint64_t restored_tokens = 0;  // restored from the host prompt cache before the step (slots model)
  double context_pairs = 0;      // the part of prefill_pairs with tokens computed before: new x computed before
  double padding_pairs = 0;      // computed before x (context_min_rows - new) of entries thinner than the minimum
};

// `context_min_rows`: TimingConfig::context_min_rows (0: no padding pairs).
StepWork stepWork(const StepPlan& plan, double context_min_rows = 0);

// The simulated duration of a step, in milliseconds (before the time scale).
double stepMilliseconds(const TimingConfig& config, const StepWork& work);

// The same, scaled by time_scale, ready to be waited for.
std::chrono::nanoseconds stepDuration(const TimingConfig& config, const StepWork& work);

// The simulated milliseconds a decode leg spends pulling `tokens` prompt tokens' KV (a token stands for 1/k real
// ones). It runs beside the steps, like NIXL's reads: no step waits for it and no token budget pays for it.
double kvTransferMilliseconds(const TimingConfig& config, uint64_t tokens);

// Simulated milliseconds scaled by time_scale, ready to be waited for.
std::chrono::nanoseconds scaledDuration(const TimingConfig& config, double simulated_ms);

}  // namespace prefixgate::sim
