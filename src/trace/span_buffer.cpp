#include "trace/span_buffer.h"

#include <algorithm>

namespace prefixgate::trace {

SpanBuffer::SpanBuffer(size_t max_spans, size_t batch_spans)
    : max_spans_(max_spans), batch_spans_(std::max<size_t>(1, batch_spans)) {}

bool SpanBuffer::push(Span&& span) {
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    if (closed_ || queued_.size() >= max_spans_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (queued_.empty()) {
      oldest_ = std::chrono::steady_clock::now();
      wake = true;  // an idle exporter waits without a deadline: it learns the oldest span's time now
    }
    queued_.push_back(std::move(span));
    wake = wake || queued_.size() == batch_spans_;
  }
  if (wake) wake_.notify_one();
  return true;
}

bool SpanBuffer::take(std::vector<Span>& out, std::chrono::milliseconds delay) {
  out.clear();
  std::unique_lock lock(mutex_);
  for (;;) {
    if (closed_ || queued_.size() >= batch_spans_) break;
    if (queued_.empty()) {
      wake_.wait(lock);
      continue;
    }
    const auto deadline = oldest_ + delay;
    if (std::chrono::steady_clock::now() >= deadline) break;
    wake_.wait_until(lock, deadline);
  }
  if (closed_ && queued_.empty()) return false;
  out.swap(queued_);
  return true;
}

void SpanBuffer::close() {
  {
    std::lock_guard lock(mutex_);
    closed_ = true;
  }
  wake_.notify_all();
}

}  // namespace prefixgate::trace
