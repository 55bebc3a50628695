#pragma once
// The OTLP/HTTP span exporter: one thread takes finished spans from the bounded buffer and POSTs them as JSON
// (trace/otlp_json.h) in batches, each export bounded by a timeout. A slow, failing or absent collector costs
// spans (counted), never a request: the request threads only push into the buffer.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "trace/otlp_endpoint.h"
#include "trace/otlp_json.h"
#include "trace/span_buffer.h"

namespace prefixgate::trace {

struct ExporterOptions {
  OtlpEndpoint endpoint;
  Resource resource;
  size_t max_queued_spans = 2048;             // tracing.max_queued_spans
  size_t max_batch_spans = 512;               // tracing.max_batch_spans
  std::chrono::milliseconds export_delay{2000};    // tracing.export_delay_ms
  std::chrono::milliseconds export_timeout{5000};  // tracing.export_timeout_ms
};

// Sends one request body within `timeout`; true when the collector accepted it (2xx), else false with `error`.
using ExportSender = std::function<bool(const std::string& body, std::chrono::milliseconds timeout, std::string& error)>;

// POSTs `body` (application/json) to `endpoint` on a fresh connection, all within `timeout`.
bool postJson(const OtlpEndpoint& endpoint, const std::string& body, std::chrono::milliseconds timeout,
              std::string& error);

class OtlpExporter {
 public:
  // `sender` null: postJson to options.endpoint.
  explicit OtlpExporter(ExporterOptions options, ExportSender sender = nullptr);
  ~OtlpExporter();  // stop()
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  void start();
  // Queues a finished span; thread-safe, never waits for an export. False when dropped (buffer full or stopped).
  bool submit(Span&& span) { return buffer_.push(std::move(span)); }
  // Stops taking spans and sends what is queued, waiting at most export_timeout in all (what is still unsent then
  // counts as failed), then joins the thread. Idempotent.
  void stop();

  uint64_t exportedSpans() const { return exported_spans_.load(std::memory_order_relaxed); }
  uint64_t failedSpans() const { return failed_spans_.load(std::memory_order_relaxed); }
  uint64_t droppedSpans() const { return buffer_.dropped(); }
  uint64_t exportedBatches() const { return exported_batches_.load(std::memory_order_relaxed); }
  uint64_t failedBatches() const { return failed_batches_.load(std::memory_order_relaxed); }

 private:
  void run();
  // Sends `spans` in batches of max_batch_spans; a batch past `flush_deadline` (when set) is not sent but counted
  // failed.
  void exportAll(const std::vector<Span>& spans);

  const ExporterOptions options_;
  ExportSender sender_;
  SpanBuffer buffer_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> flush_deadline_ns_{0};  // steady clock; set by stop()
  std::atomic<uint64_t> exported_spans_{0};
  std::atomic<uint64_t> failed_spans_{0};
  std::atomic<uint64_t> exported_batches_{0};
  std::atomic<uint64_t> failed_batches_{0};
  std::string last_error_;  // exporter thread only: warn once per new failure kind
};

}  // namespace prefixgate::trace
