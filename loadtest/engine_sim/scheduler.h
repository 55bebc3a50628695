#pragma once
// The engine's step scheduler for --kv-cache-model paged (the default), after vLLM v1's (pure: no sockets, no
// clocks). The engine runs in steps; each step computes the KV of a batch of tokens within a token budget
// (--max-num-batched-tokens):
//   1. running sequences first, in admission order: a decoding sequence needs one token (the one sampled last
//      step), a sequence still prefilling needs the rest of its prompt, cut to what is left of the budget
//      (chunked prefill). KV blocks are allocated as tokens are scheduled; when no block is free, the newest
//      running sequence is preempted (its blocks freed, its tokens to be recomputed later, ahead of the queue)
//      until the allocation fits or the sequence itself was the newest;
//   2. then, if nobody was preempted this step, waiting sequences in FIFO order while fewer than max_num_seqs
//      run: each is looked up in the prefix cache (whole blocks, at most prompt - 1 tokens: the last prompt token
//      is always computed, to sample from) and scheduled for (part of) the rest, or, if its blocks do not fit,
//      left at the head of the queue.
// A sequence whose known tokens are all computed at the end of a step samples one output token; it finishes at
// max_output_tokens, freeing its blocks (the full ones, prompt and output alike, stay cached until evicted).
// Prefill/decode hand-off (vLLM's NixlConnector, KvTransfer): a prefill leg runs as above and hands out its block
// ids when it finishes. A decode leg, when admitted, takes its cached prefix and allocates blocks for the rest of
// its prompt without computing it (StepPlan::pulls; it does not run, and counts as waiting, like vLLM's
// WAITING_FOR_REMOTE_KVS); finishPull() registers the blocks of its first prompt - 1 tokens and puts it back at the
// head of the queue, from where it computes the last prompt token and samples as usual.
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine_sim/block_hash.h"
#include "engine_sim/kv_cache.h"
#include "engine_sim/output_text.h"
#include "engine_sim/step_scheduler.h"

namespace prefixgate::sim {

struct SchedulerConfig {
  uint64_t capacity_blocks = 25000;
  uint32_t block_size = 16;
  uint32_t max_num_seqs = 256;
  uint32_t max_num_batched_tokens = 8192;
};

class Scheduler final : public StepScheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  SubmitStatus submit(SeqRequest request) override;
  std::string neverFitsReason(uint64_t prompt_tokens, uint32_t max_output_tokens) const override;
  // Forgets a sequence, waiting or running (a client that left); its blocks are freed. Unknown ids are ignored.
  void abort(SeqId id) override;

  // Plans the next step and commits it: allocations, preemptions and computed-token counts change now, as
  // they do when vLLM schedules; the step's results come with complete().
  StepPlan schedule() override;
  // Ends the step planned last: samples one token for each sequence whose tokens are all computed, finishes and
  // frees the sequences that are done. Sequences aborted since schedule() are skipped.
  StepOutcome complete(const StepPlan& plan) override;

  bool hasWork() const override { return !running_.empty() || !waiting_.empty(); }
  void finishPull(SeqId id) override;

  // Starts recording KV cache events (BlockStored, BlockRemoved, AllBlocksCleared) for takeEvents().
  void recordEvents() override;
  // The events since the last call, in the order the cache changed.
  std::vector<KvEvent> takeEvents() override;
  // vLLM's reset_prefix_cache: forgets every cached block; refused (false) while sequences hold blocks.
  bool resetPrefixCache() override { return cache_.reset(); }
  std::optional<SeqStatus> status(SeqId id) const override;
  // The tokens a prompt would find in the prefix cache now (whole blocks, at most prompt - 1). Reads only.
  uint64_t cachedPrefixTokens(std::span<const uint32_t> prompt) const override;

  size_t numRunning() const override { return running_.size(); }
  size_t numWaiting() const override { return waiting_.size() + pulling_.size(); }
  double kvCacheUsage() const override { return cache_.usage(); }
  uint64_t usedBlocks() const override { return cache_.usedBlocks(); }
  const EngineCounters& counters() const override { return counters_; }
  const KvCache& cache() const { return cache_; }
  const SchedulerConfig& config() const { return config_; }

  // KV blocks a sequence needs at most: ceil((prompt + max output) / block size).
  static uint64_t blocksNeeded(uint64_t prompt_tokens, uint64_t max_output_tokens, uint32_t block_size);

 private:
  // Where a decode leg (KvTransfer::kReceive) is with its KV pull.
  enum class Pull {
    kNone,     // nothing to pull (any other sequence, or a decode leg once admitted after its pull)
    kQueued,   // pulls when admitted
    kPulling,  // blocks allocated, transfer under way (in pulling_)
    kPulled,   // blocks registered, computed = prompt - 1; admitted next like a prefill of one token
  };
  struct Seq {
    SeqId id = 0;
    std::vector<uint32_t> tokens;  // prompt, then the sampled output
    std::vector<EngineBlockHash> hashes;  // chained hashes of the full blocks of `tokens`
    std::string cache_salt;               // its first block's extra key in BlockStored ("" = none)
    std::vector<BlockId> blocks;          // KV blocks held, in token order
    uint32_t prompt_tokens = 0;
    uint32_t max_output_tokens = 0;
    uint32_t generated = 0;
    uint64_t computed = 0;    // tokens whose KV is computed (or scheduled this step)
    size_t registered = 0;    // leading blocks registered in the prefix cache
    int64_t cached_tokens = -1;
    bool looked_up = false;   // its prefix cache lookup is counted
    uint32_t preemptions = 0;
    bool running = false;
    KvTransfer kv_transfer = KvTransfer::kNone;
    Pull pull = Pull::kNone;
    OutputText output{0};
  };

  bool scheduleRunning(Seq& seq, uint32_t& budget, StepPlan& plan);
  bool scheduleWaiting(Seq& seq, uint32_t& budget, StepPlan& plan);
  // Admits a decode leg to pull its KV: its cached prefix and fresh blocks for the rest. False when they do not fit.
  bool startPull(Seq& seq, StepPlan& plan);
  // Moves the sequence at the head of the queue into the batch with `count` tokens to compute this step.
  void admit(Seq& seq, uint32_t count, uint32_t& budget, StepPlan& plan);
  // Counts a sequence's prefix cache lookup (once, at its first admission: a preempted one's is not counted).
  void countLookup(Seq& seq, uint64_t cached);
  // Allocates blocks so `new_tokens` more tokens can be computed and registers the blocks they fill.
  bool grow(Seq& seq, uint64_t new_tokens);
  void preempt(Seq& seq, StepPlan& plan);
  void appendToken(Seq& seq, uint32_t token);
  void finish(Seq& seq);

  SchedulerConfig config_;
  KvCache cache_;
  EngineCounters counters_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<SeqId> running_;  // admission order: the newest is preempted first
  std::deque<SeqId> waiting_;
  std::vector<SeqId> pulling_;  // decode legs whose KV transfer is under way
  bool record_events_ = false;
  std::vector<KvEvent> events_;
};

}  // namespace prefixgate::sim
