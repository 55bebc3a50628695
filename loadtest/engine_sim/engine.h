#pragma once
// The simulated GPU in real time: the pure Scheduler and timing model driven by Asio timers. Session coroutines
// start a Sequence per request and co_await its prefill and each decode step; the engine wakes waiting
// sequences when others end. Single-threaded: every call comes from the one event loop that runs the sessions.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>

#include "engine_sim/metrics_text.h"
#include "engine_sim/scheduler.h"
#include "engine_sim/sim_config.h"
#include "engine_sim/timing_model.h"

namespace prefixgate::sim {

class Engine {
 public:
  // One request's sequence. Destroying it ends the sequence: a waiting one leaves the queue, a running one frees
  // its slot and KV blocks (its prompt blocks stay cached).
  class Sequence {
   public:
    ~Sequence();
    Sequence(const Sequence&) = delete;
    Sequence& operator=(const Sequence&) = delete;
    uint32_t promptTokens() const { return prompt_tokens_; }
    // Valid once prefill() returned true.
    uint32_t cachedTokens() const { return cached_tokens_; }
    uint32_t generatedTokens() const { return generated_tokens_; }

   private:
    friend class Engine;
    Sequence(Engine& engine, SeqId id, boost::asio::any_io_executor executor, uint32_t prompt_tokens);

    Engine& engine_;
    SeqId id_;
    boost::asio::steady_timer timer_;
    uint32_t prompt_tokens_;
    uint32_t cached_tokens_ = 0;
    uint32_t generated_tokens_ = 0;
    bool admitted_ = false;
    bool released_ = false;
    SteadyTime arrival_;
    SteadyTime last_token_at_;
  };

  struct StartResult {
    std::unique_ptr<Sequence> sequence;  // null when error is set
    std::string error;                   // the request can never run (needs more KV blocks than the cache has)
  };

  explicit Engine(const SimConfig& config);

  // Queues a sequence in FIFO order; its timer runs on `executor` (the session's).
  StartResult start(boost::asio::any_io_executor executor, std::span<const uint32_t> prompt_tokens,
                    uint32_t max_output_tokens);

  // Waits until the sequence is admitted and its prefill has run through the shared prefill lane, i.e. until its
  // first token is ready. Returns false when the awaiting coroutine was cancelled first.
  boost::asio::awaitable<bool> prefill(Sequence& sequence);
  // Waits one decode step (the next token is ready). Returns false when cancelled first.
  boost::asio::awaitable<bool> decodeStep(Sequence& sequence);
  // Records one token handed to the client (generation counter, time to first token, inter-token latency).
  void tokenEmitted(Sequence& sequence);
  // Ends a sequence that produced all its tokens (records its end-to-end latency) and frees its slot.
  void finish(Sequence& sequence);

  // Waits for a prefill of `tokens` uncached tokens through the shared lane (embeddings: no KV, no slot).
  // Returns false when cancelled first.
  boost::asio::awaitable<bool> prefillOnly(boost::asio::steady_timer& timer, uint64_t tokens);

  MetricsSnapshot snapshot() const;
  const EngineHistograms& histograms() const { return histograms_; }
  const Scheduler& scheduler() const { return scheduler_; }

  // Stops waking waiting sequences; call once the event loop has stopped, before its handlers are destroyed.
  void stop() { stopped_ = true; }

 private:
  void release(Sequence& sequence);

  SimConfig config_;
  TimingConfig timing_;
  Scheduler scheduler_;
  PrefillLane prefill_lane_;
  EngineHistograms histograms_;
  std::unordered_map<SeqId, Sequence*> sequences_;
  SeqId next_id_ = 1;
  bool stopped_ = false;
};

}  // namespace prefixgate::sim
