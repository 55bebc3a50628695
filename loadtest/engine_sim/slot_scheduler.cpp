#include "engine_sim/slot_scheduler.h"

#include <fmt/format.h>

#include <algorithm>

namespace prefixgate::sim {
namespace {

uint64_t ceilDiv(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

}  // namespace

SlotScheduler::SlotScheduler(const SlotSchedulerConfig& config)
    : config_(config), table_(config.table), by_slot_(table_.size()), records_(table_.size()) {}

SubmitStatus SlotScheduler::submit(SeqRequest request) {
  if (request.prompt.size() + uint64_t{request.max_output_tokens} > config_.slot_context_tokens)
    return SubmitStatus::kNeverFits;
  if (seqs_.count(request.id) != 0) return SubmitStatus::kDuplicate;
  Seq seq;
  seq.id = request.id;
  seq.prompt_tokens = static_cast<uint32_t>(request.prompt.size());
  seq.max_output_tokens = request.max_output_tokens;
  seq.output = OutputText::forPrompt(request.prompt);
  seq.tokens = std::move(request.prompt);
  seqs_.emplace(seq.id, std::move(seq));
  waiting_.push_back(request.id);
  return SubmitStatus::kQueued;
}

std::string SlotScheduler::neverFitsReason(uint64_t prompt_tokens, uint32_t max_output_tokens) const {
  // llama-server's words (it checks the prompt alone, then stops generating at the end of the context).
  return fmt::format("request ({} tokens: prompt {} + max_tokens {}) exceeds the available context size ({} "
                     "tokens), try increasing it",
                     prompt_tokens + max_output_tokens, prompt_tokens, max_output_tokens,
                     config_.slot_context_tokens);
}

void SlotScheduler::abort(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  if (it->second.running) {
    finish(it->second);
    return;
  }
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  seqs_.erase(it);
}

StepPlan SlotScheduler::schedule() {
  StepPlan plan;
  assignWaiting(plan);
  uint32_t budget = config_.max_num_batched_tokens;
  // Every generating slot's sampled token goes into the batch first.
  for (uint32_t slot = 0; slot < by_slot_.size(); ++slot) {
    Seq* seq = runningIn(slot);
    if (seq == nullptr || seq->generated == 0) continue;
    plan.entries.push_back(StepEntry{seq->id, 1, seq->computed, true});
    seq->computed += 1;
    budget -= std::min<uint32_t>(budget, 1);
  }
  // Then prompts, in slot order, while the batch has room.
  for (uint32_t slot = 0; slot < by_slot_.size() && budget > 0; ++slot) {
    Seq* seq = runningIn(slot);
    if (seq == nullptr || seq->generated > 0) continue;
    uint64_t pending = seq->tokens.size() - seq->computed;
    uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(pending, budget));
    plan.entries.push_back(StepEntry{seq->id, count, seq->computed, false});
    seq->computed += count;
    budget -= count;
  }
  return plan;
}

void SlotScheduler::assignWaiting(StepPlan& plan) {
  while (!waiting_.empty()) {
    Seq& seq = seqs_.at(waiting_.front());
    // llama-server updates its prompt cache for completion tasks only.
    std::optional<SlotAssignment> assigned = table_.assign(seq.tokens, seq.max_output_tokens > 0);
    if (!assigned) return;  // every slot busy: the queue waits for a release
    waiting_.pop_front();
    seq.slot = assigned->slot;
    seq.running = true;
    seq.cached_tokens = static_cast<int64_t>(assigned->cached_tokens);
    seq.computed = assigned->cached_tokens;
    by_slot_[seq.slot] = seq.id;
    ++running_;
    records_[seq.slot] = SlotRecord{true, seq.id, assigned->cached_tokens, 0};
    counters_.prefix_cache_queries += seq.tokens.size();
    counters_.prefix_cache_hits += assigned->cached_tokens;
    counters_.prompt_tokens += seq.prompt_tokens;
    plan.started.push_back(seq.id);
    plan.restored_tokens += assigned->restored_tokens;
  }
}

StepOutcome SlotScheduler::complete(const StepPlan& plan) {
  StepOutcome outcome;
  for (const StepEntry& entry : plan.entries) {
    auto it = seqs_.find(entry.id);
    if (it == seqs_.end() || !it->second.running) continue;
    Seq& seq = it->second;
    if (seq.computed < seq.tokens.size()) continue;  // a prefill chunk: more to come
    if (seq.max_output_tokens > 0) {
      seq.tokens.push_back(seq.output.tokenId(seq.generated));
      ++seq.generated;
      ++counters_.generation_tokens;
      outcome.sampled.push_back(seq.id);
    }
    if (seq.generated >= seq.max_output_tokens) {
      outcome.finished.push_back(seq.id);
      finish(seq);
    }
  }
  return outcome;
}

void SlotScheduler::finish(Seq& seq) {
  // The slot keeps the tokens its KV was computed for: the last sampled token never was.
  uint64_t held = std::min<uint64_t>(seq.computed, seq.tokens.size());
  table_.release(seq.slot, std::span(seq.tokens).first(held));
  SlotRecord& record = records_[seq.slot];
  record.processed_tokens = std::min<uint64_t>(held, seq.prompt_tokens) - record.cached_tokens;
  by_slot_[seq.slot].reset();
  --running_;
  SeqId id = seq.id;  // seq is gone after the erase
  seqs_.erase(id);
}

SlotScheduler::Seq* SlotScheduler::runningIn(uint32_t slot) {
  if (!by_slot_[slot]) return nullptr;
  return &seqs_.at(*by_slot_[slot]);
}

std::optional<SeqStatus> SlotScheduler::status(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  const Seq& seq = it->second;
  return SeqStatus{seq.running, seq.cached_tokens, seq.generated, 0};
}

uint64_t SlotScheduler::cachedPrefixTokens(std::span<const uint32_t> prompt) const {
  std::optional<SlotAssignment> assignment = table_.preview(prompt, true);
  return assignment ? assignment->cached_tokens : 0;
}

double SlotScheduler::kvCacheUsage() const {
  uint64_t held = 0;
  for (const auto& [id, seq] : seqs_)
    if (seq.running) held += seq.computed;
  double capacity = static_cast<double>(config_.slot_context_tokens) * table_.size();
  return capacity > 0 ? std::min(1.0, static_cast<double>(held) / capacity) : 0;
}

uint64_t SlotScheduler::usedBlocks() const {
  uint64_t blocks = 0;
  for (const auto& [id, seq] : seqs_)
    if (seq.running) blocks += ceilDiv(seq.computed, config_.block_size);
  return blocks;
}

std::vector<SlotView> SlotScheduler::slots() const {
  std::vector<SlotView> views(table_.size());
  for (uint32_t slot = 0; slot < views.size(); ++slot) {
    const SlotRecord& record = records_[slot];
    SlotView& view = views[slot];
    view.used = record.used;
    view.task = record.task;
    view.cached_tokens = record.cached_tokens;
    view.processed_tokens = record.processed_tokens;
    view.held_tokens = table_.held(slot).size();
    if (!by_slot_[slot]) continue;
    const Seq& seq = seqs_.at(*by_slot_[slot]);
    view.processing = true;
    view.held_tokens = seq.computed;
    view.processed_tokens = std::min<uint64_t>(seq.computed, seq.prompt_tokens) - record.cached_tokens;
  }
  return views;
}

}  // namespace prefixgate::sim
