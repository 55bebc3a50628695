#pragma once
// The simulated GPU in real time: the pure step scheduler (of --kv-cache-model: step_scheduler.h) and timing model
// driven by Asio timers. run() is the engine loop: it plans a step, waits the step's simulated time (x
// --time-scale), then hands out the step's results (sampled tokens, finished sequences) and wakes the sessions
// waiting for them. Session coroutines start a Sequence per request and co_await its progress; they never slow the
// engine down (tokens a slow client has not read yet simply wait in the Sequence, as vLLM's outputs queue up).
// Single-threaded: every call comes from the one event loop that runs the sessions and run().
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine_sim/cpu_burner.h"
#include "engine_sim/metrics_text.h"
#include "engine_sim/shared_cpu.h"
#include "engine_sim/step_scheduler.h"
#include "engine_sim/sim_config.h"
#include "engine_sim/timing_model.h"
#include "prefixgate/types.h"

namespace prefixgate::sim {

class Engine {
 public:
  static constexpr double kMinPredictedMs = 0.001;

  // One request's sequence. Destroying it before it finished aborts it (a client that left): it leaves the queue
  // or the batch and frees its KV blocks.
  class Sequence {
   public:
    ~Sequence();
    Sequence(const Sequence&) = delete;
    Sequence& operator=(const Sequence&) = delete;
    uint32_t promptTokens() const { return prompt_tokens_; }
    // Prompt tokens found cached (prefix cache, slot or host cache); valid once the first token is ready.
    uint32_t cachedTokens() const { return cached_tokens_; }
    // Output tokens ready to be sent.
    uint32_t generatedTokens() const { return generated_; }
    bool finished() const { return finished_; }
    // Simulated milliseconds (before --time-scale) from its first scheduling to its first token, and from its
    // first token to its last (at least 0.001 once it has one, as llama-server clamps it to 1 us).
    double promptMs() const { return generated_ == 0 ? 0 : first_token_ms_ - started_ms_; }
    double predictedMs() const {
      return generated_ == 0 ? 0 : std::max(kMinPredictedMs, last_token_ms_ - first_token_ms_);
    }
    // Decode leg: prompt tokens whose KV it pulled, and the transfer's simulated milliseconds (before
    // --time-scale); 0 until its pull started.
    uint64_t kvPulledTokens() const { return kv_pulled_tokens_; }
    double kvTransferMs() const { return kv_transfer_ms_; }
    // Prefill leg: the KV block ids it held when it finished (NixlConnector's remote_block_ids).
    const std::vector<uint32_t>& kvBlockIds() const { return kv_block_ids_; }

   private:
    friend class Engine;
    Sequence(Engine& engine, SeqId id, boost::asio::any_io_executor executor, uint32_t prompt_tokens);

    Engine& engine_;
    SeqId id_;
    boost::asio::steady_timer wake_;
    uint32_t prompt_tokens_;
    uint32_t cached_tokens_ = 0;
    uint32_t generated_ = 0;
    bool finished_ = false;
    bool released_ = false;
    SteadyTime arrival_;
    SteadyTime last_token_at_;
    double started_ms_ = 0;  // the engine's simulated clock at these events
    double first_token_ms_ = 0;
    double last_token_ms_ = 0;
    uint64_t kv_pulled_tokens_ = 0;
    double kv_transfer_ms_ = 0;
    std::vector<uint32_t> kv_block_ids_;
  };


  struct StartResult {
    std::unique_ptr<Sequence> sequence;  // null when error is set
    std::string error;                   // the request can never run (needs more KV than the cache, or a slot, has)
  };

  explicit Engine(const SimConfig& config);

  // Queues a sequence; its wake-ups run on `executor` (the session's). max_output_tokens 0 = prefill only.
  // kv_transfer: its part in a prefill/decode hand-off (step_scheduler.h).
  // cache_salt: vLLM's cache namespace (its prompt shares no cached block with another salt's or none).
  StartResult start(boost::asio::any_io_executor executor, std::span<const uint32_t> prompt_tokens,
                    uint32_t max_output_tokens, KvTransfer kv_transfer = KvTransfer::kNone,
                    std::string cache_salt = {});

  // Waits until the sequence has more than `seen` output tokens ready, or has finished. Returns false when the
  // awaiting coroutine was cancelled first.
  boost::asio::awaitable<bool> waitProgress(Sequence& sequence, uint32_t seen);

  // The engine loop; spawn it once on the event loop. Returns after stop().
  boost::asio::awaitable<void> run();
  // Ends run() and stops touching sequences; call before the event loop's handlers are destroyed.
  void stop();

  // Receives the KV cache events of each step (after the step, as vLLM publishes them) and of resets.
  using EventSink = std::function<void(std::span<const KvEvent>)>;
  void setEventSink(EventSink sink);
  // vLLM's reset_prefix_cache: forgets everything cached; false while requests hold KV.
  bool resetPrefixCache();

  // Prompt tokens a prompt would find cached if it were admitted now (read only).
  uint64_t cachedPrefixTokens(std::span<const uint32_t> prompt_tokens) const {
    return scheduler_->cachedPrefixTokens(prompt_tokens);
  }
  MetricsSnapshot snapshot() const;
  // Starts a new window for MetricsSnapshot::window (the rates llama-server and SGLang report are over the time
  // since the last scrape).
  void startActivityWindow() { window_ = EngineActivity{}; }
  const EngineHistograms& histograms() const { return histograms_; }
  const StepScheduler& scheduler() const { return *scheduler_; }

 private:
  void release(Sequence& sequence);
  // Hands a step's results to the sequences and wakes their sessions.
  void deliver(const StepOutcome& outcome);
  // Starts a timer per KV pull of the step; when it fires, the scheduler gets the pulled blocks.
  void startPulls(const StepPlan& plan, const boost::asio::any_io_executor& executor);
  void endPull(SeqId id);
  void publishEvents();
  // Adds what one step did to the activity totals and the window.
  void recordStep(const StepPlan& plan, const StepWork& work, double step_ms);
  // Waits out a step of `step_ms` simulated milliseconds that began at `start`, in slices at the speed the shared
  // CPU allows while each runs (shared_cpu.h); returns the simulated milliseconds it took, slowdowns included.
  boost::asio::awaitable<double> sharedStep(boost::asio::steady_timer& timer, SteadyTime& start, double step_ms);
  // Spends a step of `step_ms` simulated milliseconds as CPU time on the compute thread (cpu_burner.h); returns the
  // simulated milliseconds it took on the wall clock (longer when the machine's cores were busy).
  boost::asio::awaitable<double> burnStep(double step_ms);

  SimConfig config_;
  TimingConfig timing_;
  std::unique_ptr<StepScheduler> scheduler_;
  std::unique_ptr<SharedCpu> shared_cpu_;  // --shared-cpu; null when off
  std::unique_ptr<CpuBurner> burner_;      // --burn-cpu; null when off
  std::optional<boost::asio::steady_timer> burn_done_;  // run() waits on it while a step burns
  EngineHistograms histograms_;
  double sim_ms_ = 0;  // simulated time of every step so far (before --time-scale)
  EngineActivity activity_;
  EngineActivity window_;
  std::unordered_map<SeqId, Sequence*> sequences_;
  std::optional<boost::asio::steady_timer> idle_;  // run() sleeps on it while there is no work
  // The KV pulls under way (decode legs), destroyed with stop() while their io_context still exists.
  std::unordered_map<SeqId, std::unique_ptr<boost::asio::steady_timer>> pulls_;
  EventSink event_sink_;
  SeqId next_id_ = 1;
  bool stopped_ = false;
};

}  // namespace prefixgate::sim
