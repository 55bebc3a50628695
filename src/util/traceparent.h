#pragma once
// W3C Trace Context `traceparent` headers (https://www.w3.org/TR/trace-context/#traceparent-header): read from a
// client's request (the log line's trace id, the gateway's spans' parent) and written to the engine. Pure; no
// allocation.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace prefixgate::util {

// The 32 lowercase hex digits of the trace id, or "" when the header is not a valid traceparent:
// "<version>-<trace-id>-<parent-id>-<flags>" with 2, 32, 16 and 2 lowercase hex digits, version not "ff", trace id
// and parent id not all zeros. Version 00 is exactly 55 characters; a later version may append "-<more>" (the
// specification asks readers to parse such headers as version 00). The view points into `header`.
std::string_view traceIdFromTraceparent(std::string_view header);

// A valid traceparent's fields, copied out of the header (lowercase hex digits).
struct TraceParent {
  static constexpr uint8_t kSampled = 0x01;  // trace-flags bit 0: the caller recorded (sampled) its span
  std::array<char, 32> trace_id{};
  std::array<char, 16> parent_id{};
  uint8_t flags = 0;

  std::string_view traceId() const { return {trace_id.data(), trace_id.size()}; }
  std::string_view parentId() const { return {parent_id.data(), parent_id.size()}; }
  bool sampled() const { return (flags & kSampled) != 0; }
};

// The fields of a valid traceparent (as traceIdFromTraceparent judges it), or nullopt. A later version's flags are
// read as version 00's (the other bits are kept: a writer passes them on).
std::optional<TraceParent> parseTraceparent(std::string_view header);

// The version-00 header for `trace_id` (32 hex digits) and `span_id` (16), with `flags`: 55 characters.
inline constexpr size_t kTraceparentLength = 55;
using TraceparentText = std::array<char, kTraceparentLength>;
TraceparentText formatTraceparent(std::string_view trace_id, std::string_view span_id, uint8_t flags);

}  // namespace prefixgate::util
