#pragma once
// The engine's admission control (pure: no sockets, no clocks). Sequences wait in one FIFO queue and are admitted
// from its head while fewer than max_num_seqs run and the KV cache can pin their blocks; admission looks up the
// prompt's prefix in the cache (cached_tokens) and counts the Prometheus counters as vLLM does.
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "engine_sim/block_hash.h"
#include "engine_sim/prefix_cache.h"

namespace prefixgate::sim {

using SeqId = uint64_t;

struct SeqRequest {
  SeqId id = 0;
  std::vector<EngineBlockHash> blocks;  // the prompt's full blocks (blockHashes)
  uint32_t prompt_tokens = 0;
  uint32_t max_output_tokens = 0;
};

struct Admission {
  SeqId id = 0;
  uint32_t cached_tokens = 0;  // prompt tokens whose KV was found in the cache (at most prompt_tokens - 1)
};

enum class SubmitStatus {
  kAdmitted,   // running now; cached_tokens is set
  kWaiting,    // queued; admitted later by a release()
  kNeverFits,  // needs more KV blocks than the whole cache holds; nothing was recorded
};

struct SubmitResult {
  SubmitStatus status = SubmitStatus::kWaiting;
  uint32_t cached_tokens = 0;
  uint64_t blocks_needed = 0;
};

// The engine's Prometheus counters (vllm:*_total).
struct EngineCounters {
  uint64_t prefix_cache_queries = 0;  // prompt tokens looked up
  uint64_t prefix_cache_hits = 0;     // of those, found in the cache
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t preemptions = 0;  // the simulator never preempts: it reserves a sequence's blocks at admission
};

class Scheduler {
 public:
  Scheduler(uint64_t capacity_blocks, uint32_t block_size, uint32_t max_num_seqs);

  // Queues a sequence (a duplicate id is refused as kNeverFits) and admits it at once when nothing waits ahead
  // of it and it fits.
  SubmitResult submit(SeqRequest request);

  // Ends a sequence, running or waiting, finished or cancelled (unknown ids are ignored), then admits what now
  // fits from the head of the queue. Returns those admissions in FIFO order.
  std::vector<Admission> release(SeqId id);

  void addGenerationTokens(uint64_t tokens) { counters_.generation_tokens += tokens; }

  size_t numRunning() const { return running_; }
  size_t numWaiting() const { return waiting_.size(); }
  double kvCacheUsage() const { return cache_.usage(); }
  const EngineCounters& counters() const { return counters_; }
  const PrefixCache& cache() const { return cache_; }
  uint32_t blockSize() const { return block_size_; }

  // KV blocks a sequence holds while it runs: ceil((prompt + max output) / block size); the prompt's full blocks
  // are shared (cacheable), the rest are private to it.
  static uint64_t blocksNeeded(uint32_t prompt_tokens, uint32_t max_output_tokens, uint32_t block_size);

 private:
  struct Seq {
    SeqRequest request;
    uint64_t private_blocks = 0;
    bool running = false;
  };

  bool fits(const Seq& seq) const;
  uint32_t admit(Seq& seq);
  std::vector<Admission> admitFromQueue();

  uint32_t block_size_;
  uint32_t max_num_seqs_;
  PrefixCache cache_;
  EngineCounters counters_;
  size_t running_ = 0;
  std::unordered_map<SeqId, Seq> seqs_;
  std::deque<SeqId> waiting_;
};

}  // namespace prefixgate::sim
