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

#include "engine/engine_load.h"

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
// Convenience for tests and tools: every sample of `text`, with owned strings.
struct OwnedPromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  bool has_timestamp = false;
  int64_t timestamp_ms = 0;
};
std::vector<OwnedPromSample> parsePromSamples(std::string_view text, PromParseStats* stats = nullptr);

// The load a vLLM /metrics page reports (see ../shared/reference/vllm-interfaces.md): running and waiting
// requests, KV cache usage (vllm:kv_cache_usage_perc, or the older vllm:gpu_cache_usage_perc), the prefix-cache
// hit/query counters and vllm:cache_config_info's block_size and num_gpu_blocks. Several series of one metric
// (model_name / engine labels: data-parallel engines) are summed, except KV usage, which is their mean (each
// engine has its own cache, so the pod's fraction used is the mean). NaN and infinite samples are ignored; a
// missing metric leaves its field at 0 with its has_* flag false. Sets valid; the caller sets scraped_at_ms.
EngineSnapshot parseVllmMetrics(std::string_view text);

}  // namespace prefixgate::engine
