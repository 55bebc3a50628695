#pragma once
// The bounded hand-off between the threads that finish spans (event loops) and the one exporter thread: a push
// takes a short lock and never waits for the exporter; a full buffer drops the span and counts it.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "trace/span.h"

namespace prefixgate::trace {

class SpanBuffer {
 public:
  // Holds at most `max_spans` (tracing.max_queued_spans); a waiting take() wakes once `batch_spans`
  // (tracing.max_batch_spans) are queued.
  SpanBuffer(size_t max_spans, size_t batch_spans);
  SpanBuffer(const SpanBuffer&) = delete;
  SpanBuffer& operator=(const SpanBuffer&) = delete;

  // Queues a finished span. Thread-safe; false when the buffer is full or closed (the span is dropped and
  // counted in dropped()).
  bool push(Span&& span);
  // The exporter's side: waits until batch_spans are queued, the oldest queued span has waited `delay`, or the
  // buffer is closed; then moves every queued span into `out` (cleared first). False once closed and empty.
  bool take(std::vector<Span>& out, std::chrono::milliseconds delay);
  // No more pushes are accepted; a waiting take() returns what is left at once.
  void close();

  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  size_t maxSpans() const { return max_spans_; }

 private:
  const size_t max_spans_;
  const size_t batch_spans_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Span> queued_;  // guarded by mutex_
  std::chrono::steady_clock::time_point oldest_;  // when queued_ last became non-empty; guarded by mutex_
  bool closed_ = false;                           // guarded by mutex_
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace prefixgate::trace
