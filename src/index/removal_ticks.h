#pragma once
// Per pod, the newest touch among its (block, pod) entries that left the index before they expired (evicted,
// removed, dropped as a removed pod's, or refused a table slot). PrefixIndex uses it to prove a prefix held
// without visiting each of its blocks:
//   a record at tick t touches every block of its prompt with t, so while an entry (k, pod) touched at t is
//   stored, each earlier block j of its chain was touched at t or later; that entry can only have gone since
//   if its removal was noted here with a touch >= t. So when (k, pod) is newer than the pod's noted removals,
//   the pod holds blocks 0..k, each touched no earlier than block k (fresh whenever block k is).
// Pods share a slot when their ids are equal modulo kSlots: a shared slot notes the newer removal of the two,
// which only proves less, never something false. Lock-free; any thread.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace prefixgate::index {

// Time in units of PrefixIndex's touch tick since the index was built. Arithmetic wraps; only differences
// (ages) are compared, which is exact for any age under 2^32 ticks (~497 days at 10 ms). An entry would need to
// escape every refresh, tail check and sweep for that long (an index with no writes at all) to look young again.
using Tick = uint32_t;

class RemovalTicks {
 public:
  static constexpr size_t kSlots = 4096;  // gateway pod ids count up from 0: distinct slots for 4,096 pods

  // Notes that an entry of `pod` touched at `touch` left the index. Keeps the newest such touch.
  void note(uint32_t pod, Tick touch) {
    std::atomic<uint64_t>& slot = slots_[pod % kSlots];
    const uint64_t want = kNoted | touch;
    uint64_t seen = slot.load(std::memory_order_relaxed);
    while ((seen == 0 || newer(touch, static_cast<Tick>(seen))) &&
           !slot.compare_exchange_weak(seen, want, std::memory_order_release, std::memory_order_relaxed)) {
    }
  }

  // Whether an entry of `pod` touched at `touch` is newer than every removal noted for the pod.
  bool newerThanRemovals(uint32_t pod, Tick touch) const {
    const uint64_t seen = slots_[pod % kSlots].load(std::memory_order_acquire);
    return seen == 0 || newer(touch, static_cast<Tick>(seen));
  }

  // Ticks compare by their wrapping difference: exact while the two are under 2^31 ticks apart, which holds
  // for the fresh entries PrefixIndex compares (its expiry is under 2^31 ticks whenever it uses this).
  static bool newer(Tick a, Tick b) { return static_cast<int32_t>(a - b) > 0; }

 private:
  static constexpr uint64_t kNoted = uint64_t{1} << 32;  // 0 = nothing noted yet
  std::array<std::atomic<uint64_t>, kSlots> slots_{};
};

}  // namespace prefixgate::index
