// libFuzzer target for an engine's /metrics page: the Prometheus text parser (every sample, and line by line) and
// what the metrics scraper takes from it (engine::parseVllmMetrics). Nothing may crash, leak or trip a sanitizer;
// the whole-text parse agrees with the line parser, and the load numbers handed to routing are finite.
// Build and run: scripts/fuzz.sh.
#include <cmath>
#include <cstdint>
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

  const EngineSnapshot snapshot = parseVllmMetrics(text);
  check(snapshot.valid);
  for (double v : {snapshot.running, snapshot.waiting, snapshot.kv_usage, snapshot.prefix_cache_hits,
                   snapshot.prefix_cache_queries, snapshot.block_size, snapshot.num_gpu_blocks})
    check(std::isfinite(v));
  return 0;
}
