#pragma once
// A parser of the Prometheus text exposition format (0.0.4, plus the OpenMetrics and Prometheus 3 forms engines
// emit: exemplars after `#`, quoted metric and label names). Pure: no I/O, no clock. A line that does not parse
// is skipped and counted, never fatal, because one odd exporter line must not cost the gateway an engine's load
// signal.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>


namespace prefixgate::engine {

struct PromLabel {
  std::string_view name;
  std::string_view value;  // unescaped (\\, \", \n)
};

// One sample line. Views are valid only during the visitor call that receives it.
struct PromSample {
  std::string_view name;  // as on the wire, suffix included (`_total`, `_bucket`, ...)
  std::span<const PromLabel> labels;
  double value = 0;  // NaN, +Inf and -Inf included
  bool has_timestamp = false;
  int64_t timestamp_ms = 0;

  // The value of label `name`; "" when absent.
  std::string_view label(std::string_view name) const;
};

class PromVisitor {
 public:
  virtual ~PromVisitor() = default;
  // Asked once per sample line, before its labels and value are parsed: false skips the line cheaply (most of a
  // vLLM page is histogram buckets nobody routes on).
  virtual bool wants(std::string_view name) { return true; }
  virtual void sample(const PromSample& sample) = 0;
};

struct PromParseStats {
  size_t samples = 0;    // lines handed to the visitor
  size_t bad_lines = 0;  // wanted lines that did not parse (skipped)
};

// Reusable buffers: parsing with the same scratch again allocates nothing once it has grown to the longest line.
struct PromScratch {
  std::vector<PromLabel> labels;
  std::string unescaped;
};

// Parses one line (no line break in it). Comments and blank lines return false without being bad; `bad` tells
// a malformed line apart. On true, `out` holds the sample (its views point into `line` and `scratch`).
bool parsePromLine(std::string_view line, PromSample& out, PromScratch& scratch, bool& bad);

// Feeds every wanted sample of `text` to `visitor`, in order.
PromParseStats parsePromText(std::string_view text, PromVisitor& visitor);
// Go's ParseFloat spellings as Prometheus writes them (decimals, exponents, NaN, +Inf, -Inf): the whole token.
bool parsePromValue(std::string_view token, double& out);
// Convenience for tests and tools: every sample of `text`, with owned strings.
struct OwnedPromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  bool has_timestamp = false;
  int64_t timestamp_ms = 0;
};
std::vector<OwnedPromSample> parsePromSamples(std::string_view text, PromParseStats* stats = nullptr);

}  // namespace prefixgate::engine
