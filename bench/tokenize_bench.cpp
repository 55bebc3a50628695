// Tokenizer throughput on ~1 MB of mixed English and code. tools/tiktoken/bench.mjs writes the text, measures the
// npm tiktoken encoder on it and runs this binary in the same run, so the two figures can be compared directly.
//   PREFIXGATE_TOKENIZE_BENCH_TEXT  the text file (default /tmp/prefixgate-tokenize-bench.txt)
//   PREFIXGATE_TIKTOKEN_FILE        cl100k_base.json (default: the copy scripts/fetch_tiktoken.sh installs)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "tokenize/tiktoken_tokenizer.h"
#include "tokenize/tokenizer.h"

namespace prefixgate::tokenize {
namespace {

std::string envOr(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

std::string cl100kPath() {
  return envOr("PREFIXGATE_TIKTOKEN_FILE",
               std::string(PREFIXGATE_SOURCE_DIR) + "/tools/tiktoken/node_modules/tiktoken/encoders/cl100k_base.json");
}

// Empty when the file is missing; the benchmarks then report that instead of measuring nothing.
const std::string& benchText() {
  static const std::string text = [] {
    std::ifstream in(envOr("PREFIXGATE_TOKENIZE_BENCH_TEXT", "/tmp/prefixgate-tokenize-bench.txt"), std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  return text;
}

const TiktokenTokenizer* cl100k() {
  static const TiktokenTokenizer::LoadResult loaded = TiktokenTokenizer::load(cl100kPath());
  return loaded.tokenizer.get();
}

bool ready(benchmark::State& state, bool needs_cl100k) {
  if (benchText().empty()) {
    state.SkipWithError("no bench text: run `node tools/tiktoken/bench.mjs`, which writes it");
    return false;
  }
  if (needs_cl100k && cl100k() == nullptr) {
    state.SkipWithError("cl100k_base.json not loadable: run scripts/fetch_tiktoken.sh");
    return false;
  }
  return true;
}

void runEncode(benchmark::State& state, const Tokenizer& tokenizer) {
  const std::string& text = benchText();
  std::vector<uint8_t> out;
  for (auto _ : state) {
    out.clear();  // keeps capacity, as a request thread reusing its buffer would
    tokenizer.encode(text, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(tokenizer.tokenCount(out));
  state.counters["text_bytes"] = static_cast<double>(text.size());
}

void BM_TiktokenEncode(benchmark::State& state) {
  if (ready(state, true)) runEncode(state, *cl100k());
}
BENCHMARK(BM_TiktokenEncode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_CharacterEncode(benchmark::State& state) {
  if (!ready(state, false)) return;
  CharacterTokenizer tokenizer;
  runEncode(state, tokenizer);
}
BENCHMARK(BM_CharacterEncode)->Unit(benchmark::kMicrosecond);

// Start-up cost of reading and indexing the vocabulary.
void BM_TiktokenLoad(benchmark::State& state) {
  const std::string path = cl100kPath();
  for (auto _ : state) {
    auto loaded = TiktokenTokenizer::load(path);
    if (!loaded.tokenizer) {
      state.SkipWithError(loaded.error.c_str());
      return;
    }
    benchmark::DoNotOptimize(loaded.tokenizer.get());
  }
}
BENCHMARK(BM_TiktokenLoad)->Unit(benchmark::kMillisecond)->Iterations(5);

}  // namespace
}  // namespace prefixgate::tokenize
