// libFuzzer target for an engine's /metrics page: the Prometheus text parser (every sample, and line by line) and
// what the metrics scraper takes from it in every dialect (engine::parseEngineMetrics: vLLM, SGLang, llama.cpp,
// auto), and the same bytes as llama.cpp's /props (engine::parseLlamaCppProps). Nothing may crash, leak or trip a
// sanitizer; the whole-text parse agrees with the line parser, the load numbers handed to routing are finite, a
// page with no series of its dialect reads as nothing known (never zeros), and /props gives slots in range or
// an error.
// Build and run: scripts/fuzz.sh.
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/engine_metrics.h"
#include "engine/prometheus_text.h"
#include "fuzz_input.h"

namespace {

using namespace prefixgate::engine;
using prefixgate::fuzz::check;

// Counts every sample and reads every view it is given (a dangling one trips AddressSanitizer).
class CountingVisitor final : public PromVisitor {
 public:
  void sample(const PromSample& s) override {
    ++samples;
    check(!s.name.empty());
    for (const PromLabel& label : s.labels) bytes += label.name.size() + std::string_view(label.value).find('\0');
  }
  size_t bytes = 0;
  size_t samples = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CountingVisitor visitor;
  const PromParseStats stats = parsePromText(text, visitor);
  check(stats.samples == visitor.samples);

  // Line by line, the same samples and bad lines.
  PromScratch scratch;
  size_t samples = 0, bad_lines = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    PromSample sample;
    bool bad = false;
    if (parsePromLine(line, sample, scratch, bad)) ++samples;
    bad_lines += bad;
    start = end + 1;
  }
  check(samples == stats.samples && bad_lines == stats.bad_lines);

  for (EngineKind kind : {EngineKind::kVllm, EngineKind::kSglang, EngineKind::kLlamaCpp, EngineKind::kAuto}) {
    const EngineSnapshot snapshot = parseEngineMetrics(kind, text);
    check(snapshot.valid);
    check(kind == EngineKind::kAuto ? true : snapshot.engine == kind);
    for (double v : {snapshot.running, snapshot.waiting, snapshot.kv_usage, snapshot.prefix_cache_hits,
                     snapshot.prefix_cache_queries, snapshot.block_size, snapshot.num_gpu_blocks,
                     snapshot.kv_capacity_tokens})
      check(std::isfinite(v));
    if (snapshot.known_series == 0)
      check(!snapshot.has_running && !snapshot.has_waiting && !snapshot.has_kv_usage && !snapshot.has_prefix_cache &&
            !snapshot.has_kv_capacity);
    check(snapshot.known_series <= stats.samples);
  }
  (void)recogniseEngine(text);
  SlotCapacity capacity;
  std::string error;
  if (parseLlamaCppProps(text, capacity, error))
    check(capacity.slots >= 1 && capacity.slot_context_tokens >= 1 && capacity.slots <= (1u << 31) &&
          capacity.slot_context_tokens <= (1u << 31));
  else
    check(!error.empty());
  return 0;
}
