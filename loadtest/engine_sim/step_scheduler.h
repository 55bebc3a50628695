#pragma once
// What the engine loop (engine.h) drives, whatever the KV cache model (--kv-cache-model): one interface, one
// implementation per model, each pure (no sockets, no clocks) and single-threaded:
//   paged  scheduler.h       vLLM v1: paged KV blocks with prefix caching shared by every sequence (the default)
//   slots  slot_scheduler.h  llama.cpp's llama-server: one slot per parallel sequence, each keeping the tokens of
//                            the last request it served, and an optional host prompt cache
// The engine submits requests, then repeats schedule() (plan and commit a step) and complete() (the step's
// sampled tokens and finished sequences). kv_cache_model.h names the models; makeStepScheduler picks one.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine_sim/kv_events.h"

namespace prefixgate::sim {

using SeqId = uint64_t;

// A request's part in a prefill/decode hand-off (vLLM's NixlConnector; docs/simulator.md, "Prefill/decode roles").
enum class KvTransfer {
  kNone,     // aggregated: the engine computes the whole prompt itself
  kSend,     // prefill leg (do_remote_decode): computed as usual; its KV block ids are handed out when it finishes
  kReceive,  // decode leg (do_remote_prefill): the prompt's KV the cache lacks is pulled, not computed
};

struct SeqRequest {
  SeqId id = 0;
  std::vector<uint32_t> prompt;    // token ids
  uint32_t max_output_tokens = 0;  // 0 = prefill only (embeddings): done once the prompt is computed
  KvTransfer kv_transfer = KvTransfer::kNone;
  std::string cache_salt;  // vLLM's cache namespace: mixed into the first block's hash ("" = none)
};

// A decode leg whose KV pull started this step: its blocks are allocated; finishPull() ends the transfer.
struct KvPull {
  SeqId id = 0;
  uint64_t tokens = 0;  // prompt tokens pulled (those the prefix cache lacked)
};

// One sequence's share of a step.
struct StepEntry {
  SeqId id = 0;
  uint32_t new_tokens = 0;       // tokens whose KV this step computes
  uint64_t computed_before = 0;  // tokens computed before (the context the new ones attend to)
  bool decode = false;           // the one token sampled last step (else prefill, chunked or recomputed)
};

struct StepPlan {
  std::vector<StepEntry> entries;
  std::vector<SeqId> preempted;  // sent back to the head of the queue this step (their KV freed)
  std::vector<SeqId> started;    // scheduled for the first time this step: their queueing ended
  // Tokens copied from the host prompt cache into slots before this step (slots model; the copy holds up the
  // step, as llama-server restores on its one loop before the next batch).
  uint64_t restored_tokens = 0;
  // Decode legs admitted to pull their KV this step: they hold blocks but compute nothing until finishPull().
  std::vector<KvPull> pulls;
  bool empty() const { return entries.empty(); }
};

// The KV blocks a finished prefill leg held, in token order (NixlConnector's remote_block_ids).
struct KvHandOff {
  SeqId id = 0;
  std::vector<uint32_t> block_ids;
};

struct StepOutcome {
  std::vector<SeqId> sampled;   // got one more output token
  std::vector<SeqId> finished;  // done (all output tokens, or a prefill-only prompt computed); KV released
  std::vector<KvHandOff> handed_off;  // the finished prefill legs' (KvTransfer::kSend) blocks
};

enum class SubmitStatus {
  kQueued,     // waits for a step
  kNeverFits,  // the request can never run (more KV than the cache, or a slot, holds); nothing was recorded
  kDuplicate,  // the id is already known
};

// The engine's Prometheus counters (vllm:*_total).
struct EngineCounters {
  uint64_t prefix_cache_queries = 0;  // prompt tokens looked up (a preempted sequence's new lookup is not counted,
  uint64_t prefix_cache_hits = 0;     // as in vLLM, so that re-hitting its own blocks does not inflate the ratio)
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t preemptions = 0;
};

// What the engine may read about one sequence.
struct SeqStatus {
  bool running = false;
  int64_t cached_tokens = -1;  // prompt tokens found cached at its first scheduling; -1 = not yet
  uint32_t generated = 0;      // output tokens sampled so far
  uint32_t preemptions = 0;
};

// One slot as llama-server's GET /slots shows it (slots model only).
struct SlotView {
  bool processing = false;
  bool used = false;                // has served a request: the fields below describe it
  SeqId task = 0;                   // the request it serves, or served last
  uint64_t held_tokens = 0;         // tokens whose KV the slot holds (n_prompt_tokens: prompt and output)
  uint64_t cached_tokens = 0;       // that request's prompt tokens found cached (n_prompt_tokens_cache)
  uint64_t processed_tokens = 0;    // its prompt tokens computed so far (n_prompt_tokens_processed)
};

class StepScheduler {
 public:
  virtual ~StepScheduler() = default;

  // Queues a request (FIFO).
  virtual SubmitStatus submit(SeqRequest request) = 0;
  // One line saying why submit() answered kNeverFits for such a request (for the 400 answer).
  virtual std::string neverFitsReason(uint64_t prompt_tokens, uint32_t max_output_tokens) const = 0;
  // Forgets a sequence, waiting or running (a client that left); its KV is released. Unknown ids are ignored.
  virtual void abort(SeqId id) = 0;

  // Plans the next step and commits it (admissions, allocations, computed-token counts change now); the step's
  // results come with complete().
  virtual StepPlan schedule() = 0;
  // Ends the step planned last: samples one token for each sequence whose tokens are all computed, finishes the
  // sequences that are done. Sequences aborted since schedule() are skipped.
  virtual StepOutcome complete(const StepPlan& plan) = 0;
  // Whether schedule() has anything to do (decode legs still pulling their KV do not count).
  virtual bool hasWork() const = 0;
  // Ends the KV pull of a decode leg (StepPlan::pulls): its pulled blocks are registered in the prefix cache as if
  // computed, and it waits to compute its last prompt token. Unknown ids (aborted meanwhile) are ignored. A model
  // without a KV connector (slots) never pulls.
  virtual void finishPull(SeqId) {}

  // Starts recording KV cache events for takeEvents() (a model that publishes none ignores it).
  virtual void recordEvents() = 0;
  // The events since the last call, in the order the cache changed.
  virtual std::vector<KvEvent> takeEvents() = 0;
  // Forgets everything cached; refused (false) while requests hold KV.
  virtual bool resetPrefixCache() = 0;

  virtual std::optional<SeqStatus> status(SeqId id) const = 0;
  // The prompt tokens a request with this prompt would find cached if it were admitted now. Reads only.
  virtual uint64_t cachedPrefixTokens(std::span<const uint32_t> prompt) const = 0;

  virtual size_t numRunning() const = 0;
  virtual size_t numWaiting() const = 0;
  // KV held by running sequences over all of it, 0..1.
  virtual double kvCacheUsage() const = 0;
  // KV blocks held by running sequences (SGLang's num_used_tokens = this x block size).
  virtual uint64_t usedBlocks() const = 0;
  virtual const EngineCounters& counters() const = 0;
  // Each slot (slots model); empty for a model without slots.
  virtual std::vector<SlotView> slots() const { return {}; }
};

}  // namespace prefixgate::sim
