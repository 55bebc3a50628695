#include "engine_sim/cpu_burner.h"

#include <time.h>

#include <atomic>
#include <cstdint>

namespace prefixgate::sim {

CpuBurner::CpuBurner() : thread_([this] { loop(); }) {}

CpuBurner::~CpuBurner() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

double CpuBurner::threadCpuMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

void CpuBurner::burn(double cpu_ms, std::function<void()> done) {
  {
    std::lock_guard lock(mutex_);
    pending_ms_ = cpu_ms;
    done_ = std::move(done);
    has_job_ = true;
  }
  wake_.notify_one();
}

void CpuBurner::loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return has_job_ || stopping_; });
    if (stopping_) return;
    const double ms = pending_ms_;
    std::function<void()> done = std::move(done_);
    has_job_ = false;
    lock.unlock();
    const double until = threadCpuMs() + ms;
    // Work the compiler cannot drop, checked against the thread's CPU clock every few microseconds.
    static std::atomic<uint64_t> sink{0};
    uint64_t x = 0x9e3779b97f4a7c15ull;
    bool stopped = false;
    while (threadCpuMs() < until) {
      for (int i = 0; i < 2000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
      sink.store(x, std::memory_order_relaxed);
      std::lock_guard check(mutex_);
      if (stopping_) {
        stopped = true;
        break;
      }
    }
    if (stopped) return;
    if (done) done();
    lock.lock();
  }
}

}  // namespace prefixgate::sim
