#pragma once
// The engine's step scheduler for --kv-cache-model slots: llama.cpp's llama-server (tools/server/server-context.cpp,
// update_slots), pure: no sockets, no clocks. There are `slots` slots (--max-num-seqs, llama-server's --parallel),
// each with its own context of slot_context_tokens (--kv-capacity-tokens / slots: -c split over the slots), so
// sequences never compete for KV and are never preempted. Each step:
//   1. waiting requests get an idle slot, in FIFO order, as SlotTable chooses (similarity, recency, host cache);
//      while no slot is idle they wait (llama-server's deferred tasks). A request's cached tokens are what its
//      slot holds in common with its prompt, at most prompt - 1; it prefills the rest;
//   2. every decoding sequence gets its one token (llama-server adds the sampled tokens to the batch first);
//   3. sequences still prefilling get the next chunk of their prompt, in slot order, while the token budget
//      (--max-num-batched-tokens, llama-server's -b) lasts.
// A sequence whose tokens are all computed at the end of a step samples one output token; at max_output_tokens it
// finishes and its slot, holding the tokens it computed (prompt and output but the last), becomes idle.
// No KV events: llama-server publishes none.
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine_sim/output_text.h"
#include "engine_sim/slot_table.h"
#include "engine_sim/step_scheduler.h"

namespace prefixgate::sim {

struct SlotSchedulerConfig {
  SlotTableConfig table;
  uint64_t slot_context_tokens = 4096;     // prompt + max output must fit (--kv-capacity-tokens / slots)
  uint32_t max_num_batched_tokens = 8192;  // the step's token budget
  uint32_t block_size = 16;                // only to report used KV in blocks (usedBlocks)
};

class SlotScheduler final : public StepScheduler {
 public:
  explicit SlotScheduler(const SlotSchedulerConfig& config);

  // kNeverFits when prompt + max output exceed a slot's context.
  SubmitStatus submit(SeqRequest request) override;
  std::string neverFitsReason(uint64_t prompt_tokens, uint32_t max_output_tokens) const override;
  // A running sequence's slot keeps the tokens computed so far (llama-server releases a cancelled task's slot).
  void abort(SeqId id) override;

  StepPlan schedule() override;
  StepOutcome complete(const StepPlan& plan) override;
  bool hasWork() const override { return running_ > 0 || !waiting_.empty(); }

  void recordEvents() override {}
  std::vector<KvEvent> takeEvents() override { return {}; }
  // Empties every slot and the host cache; refused while a slot is busy.
  bool resetPrefixCache() override { return table_.clear(); }

  std::optional<SeqStatus> status(SeqId id) const override;
  // What the prompt would find if assigned now (SlotTable::preview); 0 while no slot is idle.
  uint64_t cachedPrefixTokens(std::span<const uint32_t> prompt) const override;

  size_t numRunning() const override { return running_; }
  size_t numWaiting() const override { return waiting_.size(); }
  // Tokens held by busy slots over all slots' context.
  double kvCacheUsage() const override;
  uint64_t usedBlocks() const override;
  const EngineCounters& counters() const override { return counters_; }
  std::vector<SlotView> slots() const override;

  const SlotTable& table() const { return table_; }

 private:
  struct Seq {
    SeqId id = 0;
    std::vector<uint32_t> tokens;  // prompt, then the sampled output
    uint32_t prompt_tokens = 0;
    uint32_t max_output_tokens = 0;
    uint32_t generated = 0;
    uint64_t computed = 0;  // tokens whose KV is computed (or scheduled this step)
    int64_t cached_tokens = -1;
    uint32_t slot = 0;  // valid while running
    bool running = false;
    OutputText output{0};
  };
  // What /slots says about a slot's last request once its sequence is gone.
  struct SlotRecord {
    bool used = false;
    SeqId task = 0;
    uint64_t cached_tokens = 0;
    uint64_t processed_tokens = 0;
  };

  // Gives idle slots to waiting requests, in FIFO order.
  void assignWaiting(StepPlan& plan);
  // Frees the sequence's slot (it keeps the computed tokens) and forgets the sequence.
  void finish(Seq& seq);
  Seq* runningIn(uint32_t slot);

  SlotSchedulerConfig config_;
  SlotTable table_;
  EngineCounters counters_;
  std::unordered_map<SeqId, Seq> seqs_;
  std::vector<std::optional<SeqId>> by_slot_;  // the sequence each slot serves
  size_t running_ = 0;
  std::deque<SeqId> waiting_;  // deferred: no idle slot yet
  std::vector<SlotRecord> records_;  // by slot
};

}  // namespace prefixgate::sim
