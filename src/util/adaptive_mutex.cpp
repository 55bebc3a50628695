#include "util/adaptive_mutex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace prefixgate::util {
namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) && std::atomic<uint32_t>::is_always_lock_free,
              "the futex word is the atomic itself");

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, nullptr, nullptr, 0);
}

}  // namespace

void AdaptiveMutex::lockContended() {
  // Spin while the holder has no sleepers (it is running and will be done soon): take the lock the moment it is
  // free. A holder with sleepers (2) means spinning has already failed others: sleep with them.
  for (int i = 0; i < kSpins; ++i) {
    cpuRelax();
    const uint32_t seen = state_.load(std::memory_order_relaxed);
    if (seen == kHeldWaited) break;
    if (seen == kFree && try_lock()) return;
  }
  // Sleep until the lock is free. Taking it with 2 (not 1) keeps the next unlock waking a sleeper that may still
  // be there; a spurious wake-up costs one system call, a lost one would hang a thread.
  while (state_.exchange(kHeldWaited, std::memory_order_acquire) != kFree)
    futex(&state_, FUTEX_WAIT_PRIVATE, kHeldWaited);
}

void AdaptiveMutex::wakeOne() { futex(&state_, FUTEX_WAKE_PRIVATE, 1); }

}  // namespace prefixgate::util
