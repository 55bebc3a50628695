#include "engine_sim/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {

uint64_t ceilDiv(uint64_t a, uint64_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config) : config_(config), cache_(config.capacity_blocks) {}

uint64_t Scheduler::blocksNeeded(uint64_t prompt_tokens, uint64_t max_output_tokens, uint32_t block_size) {
  return ceilDiv(prompt_tokens + max_output_tokens, block_size);
}

SubmitStatus Scheduler::submit(SeqRequest request) {
  if (blocksNeeded(request.prompt.size(), request.max_output_tokens, config_.block_size) > cache_.capacityBlocks())
    return SubmitStatus::kNeverFits;
  if (seqs_.count(request.id) != 0) return SubmitStatus::kDuplicate;
  Seq seq;
  seq.id = request.id;
  seq.prompt_tokens = static_cast<uint32_t>(request.prompt.size());
  seq.max_output_tokens = request.max_output_tokens;
  seq.kv_transfer = request.kv_transfer;
  // An empty prompt has nothing to pull (the HTTP layer refuses one anyway).
  if (seq.kv_transfer == KvTransfer::kReceive && !request.prompt.empty()) seq.pull = Pull::kQueued;
  seq.output = OutputText::forPrompt(request.prompt);
  seq.hashes = blockHashes(request.prompt, config_.block_size, request.cache_salt);
  seq.cache_salt = std::move(request.cache_salt);
  seq.tokens = std::move(request.prompt);
  seqs_.emplace(seq.id, std::move(seq));
  waiting_.push_back(request.id);
  return SubmitStatus::kQueued;
}

std::string Scheduler::neverFitsReason(uint64_t prompt_tokens, uint32_t max_output_tokens) const {
  return fmt::format("the request needs {} KV cache blocks of {} tokens but the cache holds {}",
                     blocksNeeded(prompt_tokens, max_output_tokens, config_.block_size), config_.block_size,
                     cache_.capacityBlocks());
}

void Scheduler::abort(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Seq& seq = it->second;
  cache_.release(seq.blocks);
  if (seq.running) {
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else if (seq.pull == Pull::kPulling) {
    pulling_.erase(std::find(pulling_.begin(), pulling_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  seqs_.erase(it);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  uint32_t budget = config_.max_num_batched_tokens;
  for (size_t index = 0; index < running_.size() && budget > 0; ++index) {
    if (!scheduleRunning(seqs_.at(running_[index]), budget, plan)) break;
  }
  // vLLM admits nobody in a step that had to preempt: the KV cache is short already.
  if (!plan.preempted.empty()) return plan;
  while (!waiting_.empty() && budget > 0 && running_.size() < config_.max_num_seqs) {
    if (!scheduleWaiting(seqs_.at(waiting_.front()), budget, plan)) break;
  }
  return plan;
}

bool Scheduler::scheduleRunning(Seq& seq, uint32_t& budget, StepPlan& plan) {
  uint64_t pending = seq.tokens.size() - seq.computed;
  if (pending == 0) return true;  // nothing to compute (cannot happen between complete() and schedule())
  uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(pending, budget));
  while (!grow(seq, count)) {
    // The newest running sequence makes room; when that is this one, it cannot run this step.
    Seq& victim = seqs_.at(running_.back());
    bool self = victim.id == seq.id;
    preempt(victim, plan);
    if (self) return false;
  }
  bool decode = seq.generated > 0 && count == 1 && seq.computed + 1 == seq.tokens.size();
  plan.entries.push_back(StepEntry{seq.id, count, seq.computed, decode});
  seq.computed += count;
  budget -= count;
  return true;
}

bool Scheduler::scheduleWaiting(Seq& seq, uint32_t& budget, StepPlan& plan) {
  if (seq.pull == Pull::kQueued) return startPull(seq, plan);
  if (seq.pull == Pull::kPulled) {
    // Its blocks are held and registered: only the last prompt token is left, computed to sample from.
    seq.pull = Pull::kNone;
    uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(seq.tokens.size() - seq.computed, budget));
    grow(seq, count);  // allocates nothing: the pull allocated the whole prompt
    admit(seq, count, budget, plan);
    return true;
  }
  const uint32_t block = config_.block_size;
  // At most prompt - 1 tokens come from the cache, in whole blocks.
  size_t limit = seq.tokens.empty() ? 0 : (seq.tokens.size() - 1) / block;
  size_t hit = std::min(cache_.longestHit(seq.hashes), limit);
  std::span<const EngineBlockHash> hit_hashes = std::span(seq.hashes).first(hit);
  uint64_t cached = uint64_t{hit} * block;
  uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(seq.tokens.size() - cached, budget));
  uint64_t fresh = ceilDiv(cached + count, block) - hit;
  if (fresh > cache_.freeBlocks() - cache_.freeAmong(hit_hashes)) return false;

  countLookup(seq, cached);
  cache_.acquireCached(hit_hashes, seq.blocks);
  seq.computed = cached;
  seq.registered = hit;
  grow(seq, count);  // fits: checked above
  admit(seq, count, budget, plan);
  return true;
}

void Scheduler::admit(Seq& seq, uint32_t count, uint32_t& budget, StepPlan& plan) {
  if (seq.cached_tokens < 0) {
    // A decode leg's pulled tokens count as cached, as vLLM's num_cached_tokens includes external ones.
    seq.cached_tokens = static_cast<int64_t>(seq.computed);
    plan.started.push_back(seq.id);
  }
  plan.entries.push_back(StepEntry{seq.id, count, seq.computed, false});
  seq.computed += count;
  budget -= count;
  seq.running = true;
  waiting_.pop_front();
  running_.push_back(seq.id);
}

void Scheduler::countLookup(Seq& seq, uint64_t cached) {
  if (seq.looked_up) return;
  seq.looked_up = true;
  counters_.prefix_cache_queries += seq.tokens.size();
  counters_.prefix_cache_hits += cached;
  counters_.prompt_tokens += seq.prompt_tokens;
}

bool Scheduler::startPull(Seq& seq, StepPlan& plan) {
  const uint32_t block = config_.block_size;
  // The local prefix cache is looked up as for any prompt; NixlConnector's get_num_new_matched_tokens pulls the
  // rest of the prompt (so at least its last token).
  size_t limit = seq.tokens.empty() ? 0 : (seq.tokens.size() - 1) / block;
  size_t hit = std::min(cache_.longestHit(seq.hashes), limit);
  std::span<const EngineBlockHash> hit_hashes = std::span(seq.hashes).first(hit);
  uint64_t fresh = ceilDiv(seq.tokens.size(), block) - hit;
  if (fresh > cache_.freeBlocks() - cache_.freeAmong(hit_hashes)) return false;

  uint64_t cached = uint64_t{hit} * block;
  countLookup(seq, cached);
  cache_.acquireCached(hit_hashes, seq.blocks);
  cache_.allocate(fresh, seq.blocks);  // fits: checked above
  seq.computed = cached;
  seq.registered = hit;
  seq.pull = Pull::kPulling;
  waiting_.pop_front();
  pulling_.push_back(seq.id);
  plan.pulls.push_back(KvPull{seq.id, seq.tokens.size() - cached});
  return true;
}

void Scheduler::finishPull(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second.pull != Pull::kPulling) return;
  Seq& seq = it->second;
  pulling_.erase(std::find(pulling_.begin(), pulling_.end(), id));
  // vLLM (_update_waiting_for_remote_kv) counts the first prompt - 1 tokens computed once they arrived and caches
  // their full blocks; the last prompt token is computed in a step, to sample the first output token.
  uint64_t end = seq.tokens.size() - 1;
  grow(seq, end - seq.computed);  // registers (and records BlockStored for) the pulled full blocks
  seq.computed = end;
  seq.pull = Pull::kPulled;
  // Like vLLM's skipped requests, it goes back to the head of the queue.
  waiting_.push_front(id);
}

bool Scheduler::grow(Seq& seq, uint64_t new_tokens) {
  const uint32_t block = config_.block_size;
  uint64_t end = seq.computed + new_tokens;
  uint64_t needed = ceilDiv(end, block);
  if (needed > seq.blocks.size() && !cache_.allocate(needed - seq.blocks.size(), seq.blocks)) return false;
  // Blocks full of computed tokens can be found by other prompts from now on.
  size_t full = std::min<size_t>(end / block, seq.hashes.size());
  KvEvent* stored = nullptr;
  for (; seq.registered < full; ++seq.registered) {
    size_t index = seq.registered;
    if (!cache_.registerBlock(seq.blocks[index], seq.hashes[index]) || !record_events_) continue;
    // One BlockStored per allocation, its blocks chained from the one before the first.
    if (stored == nullptr || stored->block_hashes.back() != seq.hashes[index - 1]) {
      std::optional<EngineBlockHash> parent;
      if (index > 0) parent = seq.hashes[index - 1];
      events_.push_back(KvEvent{KvEvent::Kind::kStored, {}, parent, {}});
      stored = &events_.back();
      if (index == 0) stored->first_block_salt = seq.cache_salt;
    }
    stored->block_hashes.push_back(seq.hashes[index]);
    auto tokens = std::span(seq.tokens).subspan(index * block, block);
    stored->token_ids.insert(stored->token_ids.end(), tokens.begin(), tokens.end());
  }
  return true;
}

void Scheduler::recordEvents() {
  record_events_ = true;
  cache_.setEventLog(&events_);
}

std::vector<KvEvent> Scheduler::takeEvents() {
  std::vector<KvEvent> out;
  out.swap(events_);
  return out;
}

void Scheduler::preempt(Seq& seq, StepPlan& plan) {
  cache_.release(seq.blocks);
  seq.blocks.clear();
  seq.computed = 0;
  seq.registered = 0;
  seq.running = false;
  ++seq.preemptions;
  ++counters_.preemptions;
  running_.erase(std::find(running_.begin(), running_.end(), seq.id));
  waiting_.push_front(seq.id);
  plan.preempted.push_back(seq.id);
}

StepOutcome Scheduler::complete(const StepPlan& plan) {
  StepOutcome outcome;
  for (const StepEntry& entry : plan.entries) {
    auto it = seqs_.find(entry.id);
    if (it == seqs_.end() || !it->second.running) continue;
    Seq& seq = it->second;
    if (seq.computed < seq.tokens.size()) continue;  // a prefill chunk: more to come
    if (seq.max_output_tokens > 0) {
      appendToken(seq, seq.output.tokenId(seq.generated));
      ++seq.generated;
      ++counters_.generation_tokens;
      outcome.sampled.push_back(seq.id);
    }
    if (seq.generated >= seq.max_output_tokens) {
      outcome.finished.push_back(seq.id);
      if (seq.kv_transfer == KvTransfer::kSend) outcome.handed_off.push_back(KvHandOff{seq.id, seq.blocks});
      finish(seq);
    }
  }
  return outcome;
}

void Scheduler::appendToken(Seq& seq, uint32_t token) {
  seq.tokens.push_back(token);
  const uint32_t block = config_.block_size;
  if (seq.tokens.size() % block != 0) return;
  EngineBlockHash parent = seq.hashes.empty() ? kRootBlockHash : seq.hashes.back();
  seq.hashes.push_back(chainBlockHash(parent, std::span(seq.tokens).last(block)));
}

void Scheduler::finish(Seq& seq) {
  SeqId id = seq.id;  // seq is gone after the erase
  cache_.release(seq.blocks);
  running_.erase(std::find(running_.begin(), running_.end(), id));
  seqs_.erase(id);
}

std::optional<SeqStatus> Scheduler::status(SeqId id) const {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return std::nullopt;
  const Seq& seq = it->second;
  return SeqStatus{seq.running, seq.cached_tokens, seq.generated, seq.preemptions};
}

uint64_t Scheduler::cachedPrefixTokens(std::span<const uint32_t> prompt) const {
  if (prompt.empty()) return 0;
  std::vector<EngineBlockHash> hashes = blockHashes(prompt, config_.block_size);
  size_t limit = (prompt.size() - 1) / config_.block_size;
  return uint64_t{std::min(cache_.longestHit(hashes), limit)} * config_.block_size;
}

}  // namespace prefixgate::sim
