#pragma once
// Spare per-request objects kept per thread, so that what a request holds until it ends (a decision's candidates,
// kept for failover and /debug/route; its prompt's blocks and matches) takes the memory a finished request gave
// back instead of allocating. Bounded: at most kSparesPerThread spares per thread and type, vectors of at most
// kSpareKeepBytes of capacity (a larger one is freed when given back), so a burst or one huge request leaves no
// memory behind. One given back on another thread than the one it came from joins that thread's spares.
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace prefixgate::util {

inline constexpr size_t kSparesPerThread = 64;
inline constexpr size_t kSpareKeepBytes = 16 << 10;

// Up to kSparesPerThread values of T kept per thread.
template <class T>
class ThreadSpares {
 public:
  // Moves a spare into `out`; false when the thread has none.
  static bool take(T& out) {
    if (closed()) return false;
    std::vector<T>& s = spares().values;
    if (s.empty()) return false;
    out = std::move(s.back());
    s.pop_back();
    return true;
  }
  // Keeps `value` for a later take() on this thread; drops it when the thread keeps enough (or is ending).
  static void give(T&& value) noexcept {
    if (closed()) return;
    std::vector<T>& s = spares().values;
    if (s.size() >= kSparesPerThread) return;
    if (s.capacity() < kSparesPerThread) {
      try {
        s.reserve(kSparesPerThread);  // once per thread: push_back below then never allocates
      } catch (...) {
        return;
      }
    }
    s.push_back(std::move(value));
  }

 private:
  struct Spares {
    std::vector<T> values;
    ~Spares() { closed() = true; }
  };
  static Spares& spares() {
    thread_local Spares s;
    return s;
  }
  // Set when the thread's spares are destroyed: what is given back later (another thread-local's destructor) is
  // dropped. Trivially destructible, so it can still be read then.
  static bool& closed() {
    thread_local bool c = false;
    return c;
  }
};

// Empties `c` (a vector or a string) and keeps its capacity unless it is over kSpareKeepBytes (then frees it).
template <class C>
void emptyKeepingSmallCapacity(C& c) {
  c.clear();
  if (c.capacity() * sizeof(typename C::value_type) > kSpareKeepBytes) C().swap(c);
}

// Vectors or strings with their capacity.
template <class C>
class CapacityPool {
 public:
  // An empty container, with a finished request's capacity when the thread has one to spare.
  static C take() {
    C c;
    ThreadSpares<C>::take(c);
    return c;
  }
  // Keeps `c`'s capacity for a later take() on this thread (emptied), or frees it.
  static void give(C&& c) noexcept {
    emptyKeepingSmallCapacity(c);
    // Only memory is worth keeping (a string's in-place characters are not).
    if (c.capacity() > C().capacity()) ThreadSpares<C>::give(std::move(c));
  }
};
template <class T>
using VectorPool = CapacityPool<std::vector<T>>;
using StringPool = CapacityPool<std::string>;

}  // namespace prefixgate::util
