#pragma once
// A mutex that spins briefly before it sleeps (glibc's PTHREAD_MUTEX_ADAPTIVE_NP), for locks held a few hundred
// nanoseconds by several request threads at once (the prefix index's shards): std::mutex sleeps in the kernel at
// the first conflict, and the futex wait and wake cost more than the critical section. Satisfies Lockable.
#include <pthread.h>

namespace prefixgate::util {

class AdaptiveMutex {
 public:
  AdaptiveMutex() {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&mutex_, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  ~AdaptiveMutex() { pthread_mutex_destroy(&mutex_); }
  AdaptiveMutex(const AdaptiveMutex&) = delete;
  AdaptiveMutex& operator=(const AdaptiveMutex&) = delete;

  void lock() { pthread_mutex_lock(&mutex_); }
  bool try_lock() { return pthread_mutex_trylock(&mutex_) == 0; }
  void unlock() { pthread_mutex_unlock(&mutex_); }

 private:
  pthread_mutex_t mutex_;
};

}  // namespace prefixgate::util
