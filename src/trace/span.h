#pragma once
// A finished (or growing) span as the OTLP exporter sends it (opentelemetry-proto trace.proto's Span): ids as
// lowercase hex, times in nanoseconds since the Unix epoch, attributes typed as OTLP's AnyValue. Plain data: built
// on a request's thread, then handed whole to the exporter's thread (trace/span_buffer.h).
#include <cstdint>
#include <string>

#include "trace/ids.h"
#include <string_view>
#include <variant>
#include <vector>

namespace prefixgate::trace {

// OTLP's Span.SpanKind values (sent as integers, as OTLP/JSON requires).
enum class SpanKind : int { kInternal = 1, kServer = 2, kClient = 3 };
// OTLP's Status.StatusCode values.
enum class StatusCode : int { kUnset = 0, kOk = 1, kError = 2 };

using AttributeValue = std::variant<std::string, int64_t, double, bool>;
struct Attribute {
  std::string key;
  AttributeValue value;
};

struct SpanEvent {
  std::string name;
  uint64_t time_unix_nano = 0;
  std::vector<Attribute> attributes;
};

struct Span {
  // Fixed-size ids: a span that is never recorded (an unsampled request's attempt, which only names its id to the
  // engine) allocates nothing for them.
  TraceIdText trace_id{};
  SpanIdText span_id{};
  SpanIdText parent_span_id{};
  bool has_parent = false;     // false: a root span (parent_span_id unused)
  std::string trace_state;     // the W3C tracestate the span's context carries ("" = none)
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  uint64_t start_time_unix_nano = 0;
  uint64_t end_time_unix_nano = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanEvent> events;
  StatusCode status = StatusCode::kUnset;
  std::string status_message;  // only with kError

  void set(std::string_view key, std::string_view value) { attributes.push_back({std::string(key), std::string(value)}); }
  void set(std::string_view key, const char* value) { set(key, std::string_view(value)); }
  void set(std::string_view key, int64_t value) { attributes.push_back({std::string(key), value}); }
  void set(std::string_view key, int value) { set(key, static_cast<int64_t>(value)); }
  void set(std::string_view key, uint64_t value) { set(key, static_cast<int64_t>(value)); }
  void set(std::string_view key, double value) { attributes.push_back({std::string(key), value}); }
  void set(std::string_view key, bool value) { attributes.push_back({std::string(key), value}); }
  void fail(std::string_view message) {
    status = StatusCode::kError;
    status_message = std::string(message);
  }
};

// Nanoseconds since the Unix epoch, now (the system clock: spans from several hosts line up on it).
uint64_t nowUnixNano();

}  // namespace prefixgate::trace
