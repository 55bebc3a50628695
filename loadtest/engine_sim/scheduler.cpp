#include "engine_sim/scheduler.h"

#include <algorithm>

namespace prefixgate::sim {

Scheduler::Scheduler(uint64_t capacity_blocks, uint32_t block_size, uint32_t max_num_seqs)
    : block_size_(block_size), max_num_seqs_(max_num_seqs), cache_(capacity_blocks) {}

uint64_t Scheduler::blocksNeeded(uint32_t prompt_tokens, uint32_t max_output_tokens, uint32_t block_size) {
  if (block_size == 0) return 0;
  uint64_t tokens = uint64_t{prompt_tokens} + max_output_tokens;
  return (tokens + block_size - 1) / block_size;
}

SubmitResult Scheduler::submit(SeqRequest request) {
  SubmitResult result;
  result.blocks_needed = blocksNeeded(request.prompt_tokens, request.max_output_tokens, block_size_);
  if (result.blocks_needed > cache_.capacityBlocks()) {
    result.status = SubmitStatus::kNeverFits;
    return result;
  }
  SeqId id = request.id;
  Seq seq;
  seq.private_blocks = result.blocks_needed - std::min<uint64_t>(result.blocks_needed, request.blocks.size());
  seq.request = std::move(request);
  auto [it, inserted] = seqs_.emplace(id, std::move(seq));
  if (!inserted) {  // a duplicate id: keep the first sequence, refuse this one
    result.status = SubmitStatus::kNeverFits;
    return result;
  }
  if (waiting_.empty() && fits(it->second)) {
    result.status = SubmitStatus::kAdmitted;
    result.cached_tokens = admit(it->second);
    return result;
  }
  waiting_.push_back(id);
  result.status = SubmitStatus::kWaiting;
  return result;
}

std::vector<Admission> Scheduler::release(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return {};
  Seq& seq = it->second;
  if (seq.running) {
    cache_.unpin(seq.request.blocks, seq.private_blocks);
    --running_;
  } else {
    waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  }
  seqs_.erase(it);
  return admitFromQueue();
}

bool Scheduler::fits(const Seq& seq) const {
  return running_ < max_num_seqs_ && cache_.canPin(seq.request.blocks, seq.private_blocks);
}

uint32_t Scheduler::admit(Seq& seq) {
  const SeqRequest& request = seq.request;
  uint64_t matched_tokens = cache_.matchPrefix(request.blocks) * uint64_t{block_size_};
  // vLLM always recomputes the last prompt token, so a full hit still leaves one token to prefill.
  uint32_t limit = request.prompt_tokens == 0 ? 0 : request.prompt_tokens - 1;
  uint32_t cached = static_cast<uint32_t>(std::min<uint64_t>(matched_tokens, limit));
  counters_.prefix_cache_queries += request.prompt_tokens;
  counters_.prefix_cache_hits += cached;
  counters_.prompt_tokens += request.prompt_tokens;
  cache_.pin(request.blocks, seq.private_blocks);
  seq.running = true;
  ++running_;
  return cached;
}

std::vector<Admission> Scheduler::admitFromQueue() {
  std::vector<Admission> admitted;
  while (!waiting_.empty()) {
    Seq& seq = seqs_.at(waiting_.front());
    if (!fits(seq)) break;
    admitted.push_back(Admission{seq.request.id, admit(seq)});
    waiting_.pop_front();
  }
  return admitted;
}

}  // namespace prefixgate::sim
