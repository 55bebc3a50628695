#include "trace/exporter.h"

#include <algorithm>
#include <span>

#include "util/log.h"

namespace prefixgate::trace {
namespace {
using Clock = std::chrono::steady_clock;

int64_t steadyNanos() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }
}  // namespace

OtlpExporter::OtlpExporter(ExporterOptions options, ExportSender sender)
    : options_(std::move(options)),
      sender_(std::move(sender)),
      buffer_(options_.max_queued_spans, options_.max_batch_spans) {
  if (!sender_) {
    sender_ = [endpoint = options_.endpoint](const std::string& body, std::chrono::milliseconds timeout,
                                             std::string& error) { return postJson(endpoint, body, timeout, error); };
  }
}

OtlpExporter::~OtlpExporter() { stop(); }

void OtlpExporter::start() {
  thread_ = std::thread([this] { run(); });
}

void OtlpExporter::stop() {
  if (stopping_.exchange(true)) {
    if (thread_.joinable()) thread_.join();
    return;
  }
  flush_deadline_ns_.store(steadyNanos() + std::chrono::nanoseconds(options_.export_timeout).count());
  buffer_.close();
  if (thread_.joinable()) thread_.join();
}

void OtlpExporter::run() {
  std::vector<Span> taken;
  while (buffer_.take(taken, options_.export_delay)) exportAll(taken);
}

void OtlpExporter::exportAll(const std::vector<Span>& spans) {
  const size_t batch = std::max<size_t>(1, options_.max_batch_spans);
  for (size_t first = 0; first < spans.size(); first += batch) {
    const std::span<const Span> part(spans.data() + first, std::min(batch, spans.size() - first));
    std::chrono::milliseconds timeout = options_.export_timeout;
    if (const int64_t deadline = flush_deadline_ns_.load(); deadline != 0) {
      // Shutting down: the flush as a whole is bounded by one export timeout.
      timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::nanoseconds(deadline - steadyNanos())));
      if (timeout.count() <= 0) {
        failed_spans_.fetch_add(part.size(), std::memory_order_relaxed);
        failed_batches_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
    }
    std::string error;
    if (sender_(encodeExportRequest(options_.resource, part), timeout, error)) {
      exported_spans_.fetch_add(part.size(), std::memory_order_relaxed);
      exported_batches_.fetch_add(1, std::memory_order_relaxed);
      last_error_.clear();
      continue;
    }
    failed_spans_.fetch_add(part.size(), std::memory_order_relaxed);
    failed_batches_.fetch_add(1, std::memory_order_relaxed);
    // One line per change of failure (not per batch): a collector down for an hour writes one warning.
    if (error != last_error_) {
      log::warn("tracing: export of {} spans to {}:{}{} failed: {} (spans are dropped and counted in "
                "prefixgate_trace_spans_total{{outcome=\"failed_export\"}})",
                part.size(), options_.endpoint.host, options_.endpoint.port, options_.endpoint.target, error);
      last_error_ = error;
    }
  }
}

}  // namespace prefixgate::trace
