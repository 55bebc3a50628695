#pragma once
// Processor sharing between simulated pods that stand in for engines sharing one machine's cores
// (--shared-cpu FILE, --shared-cpu-slowdown LIST).
//
// The simulated pods are independent, as GPUs are. The real llama-servers the real-engine benchmark runs are not:
// four one-thread pods share two cores, so a pod computes at full speed while at most one other is busy and about
// half speed while all four are. One average slowdown cannot reproduce the moments when all four prefill at once.
// Each pod of a fleet maps the same small FILE, keeps one place in it, and marks the place busy from its first step
// until it runs out of work; a step then advances in short slices, each at the speed the slowdown table gives for
// the number of pods busy at that moment (the table is measured on the real pods: loadtest/bench/calibrate.py).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prefixgate::sim {

class SharedCpu {
 public:
  static constexpr size_t kMaxPods = 64;
  // Simulated milliseconds a step advances before the number of busy pods is read again.
  static constexpr double kSliceMs = 5.0;

  // Maps FILE (created when missing) and claims a free place in it (one whose process has exited is free).
  // Throws std::runtime_error naming the file when it cannot. `slowdown`[k - 1]: how many times slower than alone
  // a busy pod computes while k pods are busy (validated by the caller: non-empty, every value > 0).
  SharedCpu(const std::string& path, std::vector<double> slowdown);
  ~SharedCpu();
  SharedCpu(const SharedCpu&) = delete;
  SharedCpu& operator=(const SharedCpu&) = delete;

  void setBusy(bool busy);
  bool busy() const { return busy_; }
  // Pods of the file busy now (this one included while busy).
  uint32_t busyPods() const;
  // The slowdown now: slowdownFor(table, max(1, busyPods())).
  double slowdown() const;

  // The table's slowdown for `busy` pods: entry busy - 1; beyond the table, its last entry scaled by busy / size
  // (processor sharing: twice the pods, half the speed each); 1 for an empty table or busy 0.
  static double slowdownFor(const std::vector<double>& table, uint32_t busy);

 private:
  struct Place {
    std::atomic<uint32_t> owner;  // the pid that holds the place; 0 = free
    std::atomic<uint32_t> busy;
  };
  static_assert(std::atomic<uint32_t>::is_always_lock_free);

  std::vector<double> table_;
  Place* places_ = nullptr;
  Place* mine_ = nullptr;
  bool busy_ = false;
};

}  // namespace prefixgate::sim
