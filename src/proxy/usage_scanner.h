#pragma once
// Reads a relayed response's usage on the way through, without parsing it: the last `"completion_tokens": N`,
// `"prompt_tokens": N` and `"cached_tokens": N` seen (the usage object of a JSON body or of a stream's usage
// chunk; cached_tokens sits in usage.prompt_tokens_details), llama.cpp's `"cache_n": N` and `"prompt_n": N` (its
// `timings` object, which its streams carry even without stream_options.include_usage: cached and computed prompt
// tokens), Anthropic's `"output_tokens": N` and `"input_tokens": N` (as completion and prompt tokens: its stream's
// message_delta carries the final output count, after message_start's), the number of SSE `data: {` events (one
// token per chunk, as vLLM streams), and the Responses API's last `"sequence_number": N` (so an error event the
// gateway ends a cut stream with is numbered next). Output tokens feed each pod's measured capacity; prompt and
// cached tokens feed the prediction audit (routing/prediction_audit.h).
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace prefixgate::proxy {

// True when a Content-Type value's media type is application/json (any case, parameters after ';' ignored): a body
// that is one JSON document, not an event stream.
bool isJsonMediaType(std::string_view content_type);

// A key found in a response body: which of the scanner's fields, and its number.
struct KeyValue {
  size_t field;
  uint64_t value;
};

class UsageScanner {
 public:
  static constexpr size_t kCarryBytes = 48;  // holds a key, its colon and a 20-digit number
  // `responses`: the body is a Responses API answer, whose sequence_number is read too (other bodies never pay for
  // that search). `events`: the body may be an SSE stream, whose `data: {` events are counted; false for a body
  // known to be one JSON document (Content-Type application/json), where that text could only sit inside a string
  // and counts nothing.
  explicit UsageScanner(bool responses = false, bool events = true) : responses_(responses), events_counted_(events) {}
  // Consumes the next bytes of the body (any split: patterns across calls are found, and the result does not
  // depend on the split; a key and number spanning more than kCarryBytes, or a number beyond 64 bits, is ignored).
  void feed(std::string_view bytes);
  // The output tokens so far: usage's completion_tokens when seen, else the SSE events seen.
  uint64_t outputTokens() const { return has_[kCompletion] ? values_[kCompletion] : events_; }
  // usage.prompt_tokens / usage.prompt_tokens_details.cached_tokens as last seen, else llama.cpp's timings
  // (cache_n + prompt_n / cache_n); empty when neither was seen.
  std::optional<uint64_t> promptTokens() const {
    if (has_[kPrompt]) return values_[kPrompt];
    if (has_[kCacheN] && has_[kPromptN]) return values_[kCacheN] + values_[kPromptN];
    return std::nullopt;
  }
  std::optional<uint64_t> cachedTokens() const { return has_[kCached] ? value(kCached) : value(kCacheN); }
  // The last Responses stream event's sequence_number; empty when none was seen.
  std::optional<uint64_t> lastSequenceNumber() const { return value(kSequence); }

 private:
  enum Field { kCompletion, kPrompt, kCached, kCacheN, kPromptN, kSequence, kFields };
  std::optional<uint64_t> value(Field f) const { return has_[f] ? std::optional<uint64_t>(values_[f]) : std::nullopt; }
  void scan(std::string_view text, size_t boundary, bool straddling_only);
  void take(std::optional<KeyValue> key);
  // The last bytes of the previous feed (at most kCarryBytes), so a pattern split across feeds is still found; in
  // place, so a scanner costs no allocation.
  std::array<char, kCarryBytes> carry_;
  size_t carry_size_ = 0;
  uint64_t values_[kFields] = {};
  bool has_[kFields] = {};
  uint64_t events_ = 0;
  bool responses_ = false;
  bool events_counted_ = true;
};

}  // namespace prefixgate::proxy
