#pragma once
// A mutex that spins briefly before it sleeps, for locks held a few hundred nanoseconds by several request threads
// at once (the prefix index's shards): std::mutex sleeps in the kernel at the first conflict, and the futex wait
// and wake cost more than the critical section. Satisfies Lockable.
//
// Uncontended, lock and unlock are one atomic instruction each, inlined: glibc's adaptive pthread mutex
// (PTHREAD_MUTEX_ADAPTIVE_NP, used here before) took about 130 instructions per lock/unlock pair through three
// calls, and a warm routing decision takes about 20 of these locks (docs/benchmarks.md, "The decision's profile").
// The sleeping protocol is the futex mutex of Drepper's "Futexes Are Tricky" (its third): 0 free, 1 held, 2 held
// and perhaps waited for; an unlock that finds 2 wakes one sleeper. Before sleeping, a contended lock spins up to
// kSpins times (glibc's adaptive mutex spins up to 100) while the holder is not known to have sleepers.
#include <atomic>
#include <cstdint>

namespace prefixgate::util {

class AdaptiveMutex {
 public:
  AdaptiveMutex() = default;
  AdaptiveMutex(const AdaptiveMutex&) = delete;
  AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;

  void lock() {
    if (!try_lock()) lockContended();
  }
  bool try_lock() {
    uint32_t expected = kFree;
    return state_.compare_exchange_strong(expected, kHeld, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() {
    if (state_.exchange(kFree, std::memory_order_release) == kHeldWaited) wakeOne();
  }

  static constexpr int kSpins = 100;

 private:
  static constexpr uint32_t kFree = 0, kHeld = 1, kHeldWaited = 2;
  void lockContended();
  void wakeOne();

  std::atomic<uint32_t> state_{kFree};
};

}  // namespace prefixgate::util
