#pragma once
// A compute thread that spends a step's time as CPU time (--burn-cpu), as an engine on CPUs does: llama-server's
// one-thread pods compute on the machine's cores, so four of them on two cores, the gateway and the client slow each
// other down. A simulated pod that only waits uses no CPU and slows nobody; one that burns its steps' time on a
// thread of its own competes for the cores as the real pod does, and its steps stretch when the machine is busy.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace prefixgate::sim {

class CpuBurner {
 public:
  CpuBurner();
  ~CpuBurner();  // stops the thread; a burn under way ends early and its callback is not called
  CpuBurner(const CpuBurner&) = delete;
  CpuBurner& operator=(const CpuBurner&) = delete;

  // Spends `cpu_ms` of this thread's CPU time computing, then calls `done` on the compute thread. One burn at a time:
  // the engine starts the next step after the last one's callback.
  void burn(double cpu_ms, std::function<void()> done);

  // CPU milliseconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID).
  static double threadCpuMs();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable wake_;
  double pending_ms_ = 0;
  std::function<void()> done_;
  bool has_job_ = false;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace prefixgate::sim
