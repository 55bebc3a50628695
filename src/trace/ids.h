#pragma once
// Random trace and span ids (W3C Trace Context: 16 and 8 bytes, never all zeros), from the calling thread's own
// generator: no lock, no shared state.
#include <array>
#include <cstdint>
#include <string_view>

namespace prefixgate::trace {

using TraceIdText = std::array<char, 32>;  // lowercase hex
using SpanIdText = std::array<char, 16>;

TraceIdText newTraceId();
SpanIdText newSpanId();
// Seeds the calling thread's id generator (tests; reproducible runs). A thread that never calls it draws its seed
// from std::random_device.
void seedIds(uint64_t seed);

inline std::string_view view(const TraceIdText& id) { return {id.data(), id.size()}; }
inline std::string_view view(const SpanIdText& id) { return {id.data(), id.size()}; }

}  // namespace prefixgate::trace
