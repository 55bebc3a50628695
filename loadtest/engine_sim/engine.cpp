#include "engine_sim/engine.h"

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include "engine_sim/block_hash.h"

namespace prefixgate::sim {
namespace asio = boost::asio;
namespace {

SteadyTime now() { return std::chrono::steady_clock::now(); }

double secondsBetween(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }

// Waits on the timer until the deadline; false when the awaiting coroutine was cancelled (before or during).
asio::awaitable<bool> waitUntil(asio::steady_timer& timer, SteadyTime deadline) {
  co_await asio::this_coro::throw_if_cancelled(false);
  asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
  if (state.cancelled() != asio::cancellation_type::none) co_return false;
  timer.expires_at(deadline);
  boost::system::error_code ec;
  co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  co_return state.cancelled() == asio::cancellation_type::none;
}

TimingConfig timingOf(const SimConfig& config) {
  return TimingConfig{config.prefill_tokens_per_s, config.step_overhead_ms, config.decode_ms_per_token,
                      config.decode_ms_per_running_seq, config.time_scale};
}

}  // namespace

Engine::Sequence::Sequence(Engine& engine, SeqId id, asio::any_io_executor executor, uint32_t prompt_tokens)
    : engine_(engine), id_(id), timer_(std::move(executor)), prompt_tokens_(prompt_tokens), arrival_(now()) {}

Engine::Sequence::~Sequence() { engine_.release(*this); }

Engine::Engine(const SimConfig& config)
    : config_(config),
      timing_(timingOf(config)),
      scheduler_(config.capacityBlocks(), config.block_size, config.max_num_seqs) {}

Engine::StartResult Engine::start(asio::any_io_executor executor, std::span<const uint32_t> prompt_tokens,
                                  uint32_t max_output_tokens) {
  StartResult result;
  SeqRequest request;
  request.id = next_id_++;
  request.blocks = blockHashes(prompt_tokens, config_.block_size);
  request.prompt_tokens = static_cast<uint32_t>(prompt_tokens.size());
  request.max_output_tokens = max_output_tokens;
  SubmitResult submitted = scheduler_.submit(std::move(request));
  if (submitted.status == SubmitStatus::kNeverFits) {
    result.error = fmt::format("the request needs {} KV cache blocks of {} tokens but the cache holds {}",
                               submitted.blocks_needed, config_.block_size, config_.capacityBlocks());
    return result;
  }
  SeqId id = next_id_ - 1;
  result.sequence.reset(new Sequence(*this, id, std::move(executor), static_cast<uint32_t>(prompt_tokens.size())));
  result.sequence->admitted_ = submitted.status == SubmitStatus::kAdmitted;
  result.sequence->cached_tokens_ = submitted.cached_tokens;
  sequences_[id] = result.sequence.get();
  return result;
}

asio::awaitable<bool> Engine::prefill(Sequence& sequence) {
  co_await asio::this_coro::throw_if_cancelled(false);
  asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
  // release() of another sequence sets admitted_ and cancels this timer to wake us.
  while (!sequence.admitted_) {
    if (state.cancelled() != asio::cancellation_type::none) co_return false;
    sequence.timer_.expires_at(SteadyTime::max());
    boost::system::error_code ec;
    co_await sequence.timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  SteadyTime admitted_at = now();
  histograms_.request_queue_time.observe(secondsBetween(sequence.arrival_, admitted_at));
  uint64_t uncached = sequence.prompt_tokens_ - sequence.cached_tokens_;
  SteadyTime done = prefill_lane_.reserve(admitted_at, prefillDuration(timing_, uncached));
  co_return co_await waitUntil(sequence.timer_, done);
}

asio::awaitable<bool> Engine::decodeStep(Sequence& sequence) {
  auto step = decodeStepDuration(timing_, scheduler_.numRunning());
  co_return co_await waitUntil(sequence.timer_, now() + step);
}

void Engine::tokenEmitted(Sequence& sequence) {
  SteadyTime at = now();
  if (sequence.generated_tokens_ == 0) {
    histograms_.time_to_first_token.observe(secondsBetween(sequence.arrival_, at));
  } else {
    histograms_.inter_token_latency.observe(secondsBetween(sequence.last_token_at_, at));
  }
  sequence.last_token_at_ = at;
  ++sequence.generated_tokens_;
  scheduler_.addGenerationTokens(1);
}

void Engine::finish(Sequence& sequence) {
  if (sequence.released_) return;
  histograms_.e2e_request_latency.observe(secondsBetween(sequence.arrival_, now()));
  release(sequence);
}

asio::awaitable<bool> Engine::prefillOnly(asio::steady_timer& timer, uint64_t tokens) {
  SteadyTime done = prefill_lane_.reserve(now(), prefillDuration(timing_, tokens));
  co_return co_await waitUntil(timer, done);
}

MetricsSnapshot Engine::snapshot() const {
  MetricsSnapshot snapshot;
  snapshot.num_requests_running = scheduler_.numRunning();
  snapshot.num_requests_waiting = scheduler_.numWaiting();
  snapshot.kv_cache_usage = scheduler_.kvCacheUsage();
  snapshot.counters = scheduler_.counters();
  snapshot.block_size = config_.block_size;
  snapshot.num_gpu_blocks = config_.capacityBlocks();
  return snapshot;
}

void Engine::release(Sequence& sequence) {
  if (sequence.released_) return;
  sequence.released_ = true;
  sequences_.erase(sequence.id_);
  if (stopped_) return;
  for (const Admission& admission : scheduler_.release(sequence.id_)) {
    auto it = sequences_.find(admission.id);
    if (it == sequences_.end()) continue;
    it->second->admitted_ = true;
    it->second->cached_tokens_ = admission.cached_tokens;
    it->second->timer_.cancel();
  }
}

}  // namespace prefixgate::sim
