#include "engine_sim/engine.h"

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace prefixgate::sim {
namespace asio = boost::asio;
namespace {

// A step that starts late (the loop was busy) catches up at most this much, so a stall does not turn into a
// burst of back-to-back steps.
constexpr auto kMaxCatchUp = std::chrono::milliseconds(1);

SteadyTime now() { return std::chrono::steady_clock::now(); }

// The scheduler of --kv-cache-model (kv_cache_model.h).
std::unique_ptr<StepScheduler> makeStepScheduler(const SimConfig& config) {
  switch (config.kvCacheModel()) {
    case KvCacheModel::kSlots: return std::make_unique<SlotScheduler>(config.slotSchedulerConfig());
    case KvCacheModel::kPaged: break;
  }
  return std::make_unique<Scheduler>(config.schedulerConfig());
}

double secondsBetween(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }

}  // namespace

Engine::Sequence::Sequence(Engine& engine, SeqId id, asio::any_io_executor executor, uint32_t prompt_tokens)
    : engine_(engine), id_(id), wake_(std::move(executor)), prompt_tokens_(prompt_tokens), arrival_(now()) {}

Engine::Sequence::~Sequence() { engine_.release(*this); }

Engine::Engine(const SimConfig& config)
    : config_(config),
      timing_(config.timingConfig()),
      scheduler_(makeStepScheduler(config)),
      histograms_(engineHistograms(config.dialect())) {
  if (!config.shared_cpu_file.empty())
    shared_cpu_ = std::make_unique<SharedCpu>(config.shared_cpu_file, config.shared_cpu_slowdown);
  if (config.burn_cpu) burner_ = std::make_unique<CpuBurner>();
}

Engine::StartResult Engine::start(asio::any_io_executor executor, std::span<const uint32_t> prompt_tokens,
                                  uint32_t max_output_tokens, KvTransfer kv_transfer, std::string cache_salt) {
  StartResult result;
  SeqId id = next_id_++;
  SeqRequest request{id, std::vector<uint32_t>(prompt_tokens.begin(), prompt_tokens.end()), max_output_tokens,
                     kv_transfer, std::move(cache_salt)};
  if (scheduler_->submit(std::move(request)) != SubmitStatus::kQueued) {
    result.error = scheduler_->neverFitsReason(prompt_tokens.size(), max_output_tokens);
    return result;
  }
  result.sequence.reset(new Sequence(*this, id, std::move(executor), static_cast<uint32_t>(prompt_tokens.size())));
  sequences_[id] = result.sequence.get();
  if (idle_) idle_->cancel();
  return result;
}

asio::awaitable<bool> Engine::waitProgress(Sequence& sequence, uint32_t seen) {
  co_await asio::this_coro::throw_if_cancelled(false);
  asio::cancellation_state state = co_await asio::this_coro::cancellation_state;
  // deliver() cancels the timer to wake us.
  while (sequence.generated_ <= seen && !sequence.finished_) {
    if (state.cancelled() != asio::cancellation_type::none || stopped_) co_return false;
    sequence.wake_.expires_at(SteadyTime::max());
    boost::system::error_code ec;
    co_await sequence.wake_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return true;
}

asio::awaitable<void> Engine::run() {
  auto executor = co_await asio::this_coro::executor;
  idle_.emplace(executor);
  burn_done_.emplace(executor);
  asio::steady_timer step_timer(executor);
  SteadyTime anchor = now();
  boost::system::error_code ec;
  while (!stopped_) {
    if (!scheduler_->hasWork()) {
      if (shared_cpu_) shared_cpu_->setBusy(false);
      idle_->expires_at(SteadyTime::max());
      co_await idle_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
      anchor = now();
      continue;
    }
    StepPlan plan = scheduler_->schedule();
    startPulls(plan, executor);
    // A step that only started KV pulls computes nothing: no step time passes.
    if (plan.empty() && !plan.pulls.empty()) continue;
    SteadyTime started = now();
    for (SeqId id : plan.started) {
      auto it = sequences_.find(id);
      if (it == sequences_.end()) continue;
      it->second->started_ms_ = sim_ms_;
      histograms_.request_queue_time.observe(secondsBetween(it->second->arrival_, started));
      // Known now (the lookup happened at scheduling); a sequence may finish, and leave the scheduler, in this step.
      if (auto status = scheduler_->status(id))
        it->second->cached_tokens_ = static_cast<uint32_t>(std::max<int64_t>(0, status->cached_tokens));
    }
    StepWork work = stepWork(plan, timing_.context_min_rows);
    auto duration = stepDuration(timing_, work);
    double step_ms = stepMilliseconds(timing_, work);
    if (duration.count() > 0 && burner_) {
      step_ms = co_await burnStep(step_ms);
      anchor = now();
    } else if (duration.count() > 0 && shared_cpu_) {
      anchor = std::max(anchor, started - kMaxCatchUp);
      step_ms = co_await sharedStep(step_timer, anchor, step_ms);
    } else if (duration.count() > 0) {
      // Steps follow each other on a simulated clock, so the loop's own work does not stretch them.
      SteadyTime deadline = std::max(anchor, started - kMaxCatchUp) + duration;
      anchor = deadline;
      step_timer.expires_at(deadline);
      co_await step_timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    } else {
      // Time scale 0: no delays, but let the sessions run between steps.
      co_await asio::post(executor, asio::use_awaitable);
    }
    if (stopped_) break;
    recordStep(plan, work, step_ms);
    deliver(scheduler_->complete(plan));
    publishEvents();
  }
}

asio::awaitable<double> Engine::sharedStep(asio::steady_timer& timer, SteadyTime& start, double step_ms) {
  shared_cpu_->setBusy(true);
  double left = step_ms, taken = 0;
  boost::system::error_code ec;
  while (left > 0 && !stopped_) {
    double slowdown = shared_cpu_->slowdown();
    double slice = std::min(left * slowdown, SharedCpu::kSliceMs);
    taken += slice;
    left -= slice / slowdown;
    start += scaledDuration(timing_, slice);
    timer.expires_at(start);
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  co_return taken;
}

asio::awaitable<double> Engine::burnStep(double step_ms) {
  auto executor = co_await asio::this_coro::executor;
  const SteadyTime begin = now();
  burn_done_->expires_at(SteadyTime::max());
  // The callback runs on the compute thread: it only posts the wake-up to this loop, which is waiting by then (the
  // post cannot run before this coroutine suspends on the timer, on this same thread).
  burner_->burn(step_ms * timing_.time_scale, [this, executor] {
    asio::post(executor, [this] {
      if (!stopped_ && burn_done_) burn_done_->cancel();
    });
  });
  boost::system::error_code ec;
  co_await burn_done_->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  co_return std::chrono::duration<double, std::milli>(now() - begin).count() / timing_.time_scale;
}

void Engine::startPulls(const StepPlan& plan, const asio::any_io_executor& executor) {
  for (const KvPull& pull : plan.pulls) {
    double ms = kvTransferMilliseconds(timing_, pull.tokens);
    if (auto it = sequences_.find(pull.id); it != sequences_.end()) {
      it->second->kv_pulled_tokens_ = pull.tokens;
      it->second->kv_transfer_ms_ = ms;
    }
    auto timer = std::make_unique<asio::steady_timer>(executor, scaledDuration(timing_, ms));
    timer->async_wait([this, id = pull.id](const boost::system::error_code& ec) {
      if (!ec && !stopped_) endPull(id);
    });
    pulls_[pull.id] = std::move(timer);
  }
}

void Engine::endPull(SeqId id) {
  pulls_.erase(id);
  scheduler_->finishPull(id);
  if (idle_) idle_->cancel();  // the sequence can be scheduled now
}

void Engine::setEventSink(EventSink sink) {
  event_sink_ = std::move(sink);
  if (event_sink_) scheduler_->recordEvents();
}

void Engine::publishEvents() {
  if (!event_sink_) return;
  std::vector<KvEvent> events = scheduler_->takeEvents();
  if (!events.empty()) event_sink_(events);
}

bool Engine::resetPrefixCache() {
  bool reset = scheduler_->resetPrefixCache();
  publishEvents();
  return reset;
}

void Engine::recordStep(const StepPlan& plan, const StepWork& work, double step_ms) {
  sim_ms_ += step_ms;
  for (EngineActivity* activity : {&activity_, &window_}) {
    ++activity->steps;
    activity->busy_slot_steps += plan.entries.size();
    activity->prefill_tokens += work.prefill_tokens;
    if (work.prefill_tokens > 0) activity->prefill_ms += step_ms;
    activity->busy_ms += step_ms;
  }
}

void Engine::deliver(const StepOutcome& outcome) {
  SteadyTime at = now();
  for (const KvHandOff& hand_off : outcome.handed_off)
    if (auto it = sequences_.find(hand_off.id); it != sequences_.end()) it->second->kv_block_ids_ = hand_off.block_ids;
  for (SeqId id : outcome.sampled) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    Sequence& sequence = *it->second;
    if (sequence.generated_ == 0) {
      histograms_.time_to_first_token.observe(secondsBetween(sequence.arrival_, at));
      sequence.first_token_ms_ = sim_ms_;
    } else {
      histograms_.inter_token_latency.observe(secondsBetween(sequence.last_token_at_, at));
    }
    sequence.last_token_at_ = at;
    sequence.last_token_ms_ = sim_ms_;
    ++sequence.generated_;
    uint64_t length = uint64_t{sequence.prompt_tokens_} + sequence.generated_;
    for (EngineActivity* activity : {&activity_, &window_}) {
      ++activity->generated_tokens;
      activity->max_sequence_tokens = std::max(activity->max_sequence_tokens, length);
    }
    sequence.wake_.cancel();
  }
  for (SeqId id : outcome.finished) {
    auto it = sequences_.find(id);
    if (it == sequences_.end()) continue;
    Sequence& sequence = *it->second;
    sequence.finished_ = true;
    histograms_.e2e_request_latency.observe(secondsBetween(sequence.arrival_, at));
    for (EngineActivity* activity : {&activity_, &window_}) {
      activity->predicted_tokens += sequence.generated_;
      activity->predicted_steps += sequence.generated_ > 0 ? sequence.generated_ - 1 : 0;
      activity->predicted_ms += sequence.predictedMs();
    }
    sequence.wake_.cancel();
  }
}

void Engine::stop() {
  stopped_ = true;
  // The timers go now, while their io_context still exists (the engine outlives the server's io_context); a wait
  // on one ends with operation_aborted and nothing touches it again.
  burner_.reset();  // joins the compute thread: no wake-up is posted after this
  idle_.reset();
  burn_done_.reset();
  pulls_.clear();
}

MetricsSnapshot Engine::snapshot() const {
  MetricsSnapshot snapshot;
  snapshot.num_requests_running = scheduler_->numRunning();
  snapshot.num_requests_waiting = scheduler_->numWaiting();
  snapshot.kv_cache_usage = scheduler_->kvCacheUsage();
  snapshot.counters = scheduler_->counters();
  snapshot.block_size = config_.block_size;
  snapshot.num_gpu_blocks = config_.capacityBlocks();
  snapshot.used_blocks = scheduler_->usedBlocks();
  snapshot.slots = scheduler_->slots();
  snapshot.activity = activity_;
  snapshot.window = window_;
  return snapshot;
}

void Engine::release(Sequence& sequence) {
  if (sequence.released_) return;
  sequence.released_ = true;
  sequences_.erase(sequence.id_);
  if (stopped_) return;
  pulls_.erase(sequence.id_);  // a client that left during its KV pull
  if (!sequence.finished_) scheduler_->abort(sequence.id_);
}

}  // namespace prefixgate::sim
