#pragma once
// The one line each request leaves in the log, as text ("request id=... model=... status=...") or, with
// `log_format: json`, as one JSON object with the same fields (docs/configuration.md, "Logs"). Pure: the entry is
// a set of views of the RequestOutcome that writes it, formatted without I/O.
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace prefixgate::server {

// What a finished request's line says. Views, valid while the entry is used; "" / -1 / 0 / nullopt = absent.
struct RequestLogEntry {
  std::string_view id;
  std::string_view method;  // client-given (like path, model, error): cut and escaped by the formatters
  std::string_view path;
  std::string_view model;
  std::string_view strategy;
  std::string_view pod;
  int match_percent = -1;
  int status = 0;
  double latency_seconds = 0;
  double first_byte_seconds = -1;
  double slot_wait_seconds = -1;  // held at the gateway for a busy slot (slot waits); -1 = not held
  uint64_t output_tokens = 0;
  std::optional<uint64_t> cached_tokens;            // reported by the engine
  std::optional<uint64_t> predicted_cached_tokens;  // the prediction audit's
  // Disaggregated prefill/decode; the rest of this group is read only when pd_outcome is set.
  std::string_view pd_outcome;
  std::string_view prefill_pod;
  int prefill_match_percent = -1;
  double prefill_seconds = -1;
  double handoff_seconds = -1;
  int prefill_retries = 0;
  std::string_view transfer_note;
  std::string_view key;  // the API key's name
  bool stream = false;
  int retries = 0;
  int stale_retries = 0;
  std::string_view reason;  // logged only with a status >= 400
  std::string_view message;
  std::string_view trace_id;  // the client's traceparent's (JSON only)
};

// The text line, without time and level: "request id=<id> <METHOD> <path> model=... status=... latency_ms=...".
std::string requestLogText(const RequestLogEntry& entry);
// The same fields added to `record` (log::record's object: ts, level, msg): strings as given (cut to the text
// line's bounds, invalid UTF-8 left to log::dumpRecord), milliseconds as numbers rounded to 0.1.
void addRequestLogFields(const RequestLogEntry& entry, nlohmann::ordered_json& record);

}  // namespace prefixgate::server
