#include "server/request_log.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "openai/errors.h"

namespace prefixgate::server {
namespace {

// Bounds on client-given text in a line, the same in both formats: one request, one line of bounded size.
constexpr size_t kMaxMethodBytes = 32;
constexpr size_t kMaxPathBytes = 256;
constexpr size_t kMaxModelBytes = 128;
constexpr size_t kMaxTransferNoteBytes = 200;
constexpr size_t kMaxMessageBytes = 512;

std::string cut(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return fmt::format("{}...({} bytes)", text.substr(0, max_bytes), text.size());
}

double millis(double seconds) { return std::round(seconds * 10000) / 10; }

std::string percentText(int percent) { return percent >= 0 ? std::to_string(percent) : "-"; }

}  // namespace

std::string requestLogText(const RequestLogEntry& e) {
  using openai::printable;
  std::string line = fmt::format("request id={} {} {} model={} strategy={} pod={} match={} status={} latency_ms={:.1f}",
                                 e.id, printable(e.method, kMaxMethodBytes), printable(e.path, kMaxPathBytes),
                                 e.model.empty() ? "-" : printable(e.model, kMaxModelBytes),
                                 e.strategy.empty() ? "-" : e.strategy, e.pod.empty() ? "-" : e.pod,
                                 percentText(e.match_percent), e.status, e.latency_seconds * 1000);
  if (e.first_byte_seconds >= 0) line += fmt::format(" ttfb_ms={:.1f}", e.first_byte_seconds * 1000);
  if (e.slot_wait_seconds >= 0) line += fmt::format(" slot_wait_ms={:.1f}", e.slot_wait_seconds * 1000);
  if (e.output_tokens > 0) line += fmt::format(" output_tokens={}", e.output_tokens);
  if (e.cached_tokens) line += fmt::format(" cached_tokens={}", *e.cached_tokens);
  if (e.predicted_cached_tokens) line += fmt::format(" predicted_cached_tokens={}", *e.predicted_cached_tokens);
  if (!e.pd_outcome.empty()) {
    line += fmt::format(" pd={}", e.pd_outcome);
    if (!e.prefill_pod.empty())
      line += fmt::format(" prefill_pod={} prefill_match={}", e.prefill_pod, percentText(e.prefill_match_percent));
    if (e.prefill_seconds >= 0) line += fmt::format(" prefill_ms={:.1f}", e.prefill_seconds * 1000);
    if (e.handoff_seconds >= 0) line += fmt::format(" handoff_ms={:.1f}", e.handoff_seconds * 1000);
    if (e.prefill_retries > 0) line += fmt::format(" prefill_retries={}", e.prefill_retries);
    if (!e.transfer_note.empty())
      line += " transfer=\"" + printable(e.transfer_note, kMaxTransferNoteBytes) + "\"";
  }
  if (!e.key.empty()) line += fmt::format(" key={}", e.key);
  if (e.stream) line += " stream=true";
  if (e.retries > 0) line += fmt::format(" retries={}", e.retries);
  if (e.stale_retries > 0) line += fmt::format(" stale_connection_retries={}", e.stale_retries);
  if (!e.reason.empty() && e.status >= 400) line += fmt::format(" reason={}", e.reason);
  if (!e.message.empty()) line += " error=\"" + printable(e.message, kMaxMessageBytes) + "\"";
  return line;
}

void addRequestLogFields(const RequestLogEntry& e, nlohmann::ordered_json& r) {
  // The text line's fields under the same names; a field the text line leaves out (or shows as "-") is absent.
  r["id"] = std::string(e.id);
  if (!e.trace_id.empty()) r["trace_id"] = std::string(e.trace_id);
  r["method"] = cut(e.method, kMaxMethodBytes);
  r["path"] = cut(e.path, kMaxPathBytes);
  if (!e.model.empty()) r["model"] = cut(e.model, kMaxModelBytes);
  if (!e.strategy.empty()) r["strategy"] = std::string(e.strategy);
  if (!e.pod.empty()) r["pod"] = std::string(e.pod);
  if (e.match_percent >= 0) r["match"] = e.match_percent;
  r["status"] = e.status;
  r["latency_ms"] = millis(e.latency_seconds);
  if (e.first_byte_seconds >= 0) r["ttfb_ms"] = millis(e.first_byte_seconds);
  if (e.slot_wait_seconds >= 0) r["slot_wait_ms"] = millis(e.slot_wait_seconds);
  if (e.output_tokens > 0) r["output_tokens"] = e.output_tokens;
  if (e.cached_tokens) r["cached_tokens"] = *e.cached_tokens;
  if (e.predicted_cached_tokens) r["predicted_cached_tokens"] = *e.predicted_cached_tokens;
  if (!e.pd_outcome.empty()) {
    r["pd"] = std::string(e.pd_outcome);
    if (!e.prefill_pod.empty()) {
      r["prefill_pod"] = std::string(e.prefill_pod);
      if (e.prefill_match_percent >= 0) r["prefill_match"] = e.prefill_match_percent;
    }
    if (e.prefill_seconds >= 0) r["prefill_ms"] = millis(e.prefill_seconds);
    if (e.handoff_seconds >= 0) r["handoff_ms"] = millis(e.handoff_seconds);
    if (e.prefill_retries > 0) r["prefill_retries"] = e.prefill_retries;
    if (!e.transfer_note.empty()) r["transfer"] = cut(e.transfer_note, kMaxTransferNoteBytes);
  }
  if (!e.key.empty()) r["key"] = std::string(e.key);
  if (e.stream) r["stream"] = true;
  if (e.retries > 0) r["retries"] = e.retries;
  if (e.stale_retries > 0) r["stale_connection_retries"] = e.stale_retries;
  if (!e.reason.empty() && e.status >= 400) r["reason"] = std::string(e.reason);
  if (!e.message.empty()) r["error"] = cut(e.message, kMaxMessageBytes);
}

}  // namespace prefixgate::server
