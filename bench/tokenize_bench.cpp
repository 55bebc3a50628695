// Tokenizer throughput. BM_TiktokenEncode runs on ~1 MB of mixed English and code: tools/tiktoken/bench.mjs writes
// that text, measures the npm tiktoken encoder on it and runs this binary in the same run, so the two figures can
// be compared directly. The sized rows take the first 8 KiB, 256 KiB or 1 MiB of the same text (ASCII-heavy) or of
// a seeded multilingual text (CJK, kana, Hangul, Cyrillic, emoji, numbers: every piece needs the UTF-8 decoder).
//   PREFIXGATE_TOKENIZE_BENCH_TEXT  the text file (default /tmp/prefixgate-tokenize-bench.txt)
//   PREFIXGATE_TIKTOKEN_FILE        cl100k_base.json (default: the copy scripts/fetch_tiktoken.sh installs)
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
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

void appendCodePoint(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// 1 MiB of seeded multilingual chat-like text. Code points come from narrow ranges of each script so that, as in
// real text, some are whole tokens and others merge from bytes.
const std::string& mixedText() {
  static const std::string text = [] {
    std::mt19937_64 rng(12);
    auto below = [&](uint64_t n) { return static_cast<uint32_t>(rng() % n); };
    static const char* const kEnglish[] = {"the", "model", "answer", "don't", "it's", "we'll", "prompt", "cache",
                                           "route", "token", "Hello", "price", "user", "and", "of", "a"};
    static const char* const kEmoji[] = {"😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🚀", "1️⃣", "🤖", "✅"};
    static const char* const kPunct[] = {"。", "，", "、", "！", "？", ". ", ", ", ": ", "(", ")", "「", "」"};
    struct Script {
      char32_t first;
      uint32_t span;
      bool spaced;  // words separated by spaces
    };
    static const Script kScripts[] = {{0x4E00, 600, false}, {0x3041, 80, false}, {0x30A1, 80, false},
                                      {0xAC00, 400, true},  {0x0430, 32, true},  {0x03B1, 24, true},
                                      {0x00E0, 30, true}};
    std::string out;
    while (out.size() < (size_t{1} << 20)) {
      switch (below(10)) {
        case 0:
        case 1:
        case 2:
        case 3: {
          const Script& s = kScripts[below(std::size(kScripts))];
          const uint32_t words = 1 + below(6);
          for (uint32_t w = 0; w < words; ++w) {
            if (s.spaced) out += ' ';
            for (uint32_t n = 1 + below(s.spaced ? 6 : 12); n > 0; --n) appendCodePoint(s.first + below(s.span), out);
          }
          out += kPunct[below(std::size(kPunct))];
          break;
        }
        case 4:
        case 5:
          for (uint32_t n = 1 + below(5); n > 0; --n) (out += ' ') += kEnglish[below(std::size(kEnglish))];
          break;
        case 6:
          out += kEmoji[below(std::size(kEmoji))];
          break;
        case 7:
          out += ' ';
          for (uint32_t n = 1 + below(9); n > 0; --n) out += static_cast<char>('0' + below(10));
          if (below(2) == 0) (out += '.') += std::to_string(below(100));
          break;
        case 8:
          out += below(3) == 0 ? "\n\n" : "\n";
          break;
        default:
          out += kPunct[below(std::size(kPunct))];
      }
    }
    return out;
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

// The first `bytes` of text, cut back to a UTF-8 boundary.
std::string_view head(const std::string& text, size_t bytes) {
  size_t end = std::min(bytes, text.size());
  while (end > 0 && end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) --end;
  return std::string_view(text).substr(0, end);
}

void runEncode(benchmark::State& state, const Tokenizer& tokenizer, std::string_view text) {
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
  if (ready(state, true)) runEncode(state, *cl100k(), benchText());
}
BENCHMARK(BM_TiktokenEncode)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_TiktokenAscii(benchmark::State& state) {
  if (ready(state, true)) runEncode(state, *cl100k(), head(benchText(), static_cast<size_t>(state.range(0))));
}
BENCHMARK(BM_TiktokenAscii)->Arg(8 << 10)->Arg(256 << 10)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

void BM_TiktokenMixed(benchmark::State& state) {
  if (ready(state, true)) runEncode(state, *cl100k(), head(mixedText(), static_cast<size_t>(state.range(0))));
}
BENCHMARK(BM_TiktokenMixed)->Arg(8 << 10)->Arg(256 << 10)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

// With the segment cache (64 MiB, the default): a 256 KiB conversation (ASCII-heavy or multilingual) resent with a
// new ~1 KiB turn each time, as a chat client does; MB/s counts the whole text.
const TiktokenTokenizer* cachedCl100k() {
  static const TiktokenTokenizer::LoadResult loaded = [] {
    auto result = TiktokenTokenizer::load(cl100kPath());
    if (result.tokenizer) result.tokenizer->enableSegmentCache((size_t{64} << 20) / kTokenIdBytes);
    return result;
  }();
  return loaded.tokenizer.get();
}

void BM_TiktokenResentConversation(benchmark::State& state) {
  if (!ready(state, true)) return;
  const std::string conversation(head(state.range(0) == 0 ? benchText() : mixedText(), 256 << 10));
  const std::string_view turns = head(state.range(0) == 0 ? mixedText() : benchText(), 1 << 20);
  std::vector<uint8_t> out;
  std::string text;
  size_t turn = 0;
  for (auto _ : state) {
    text = conversation;
    (text += "\nuser: ") += turns.substr((turn++ * 1024) % (turns.size() - 2048), 1024);
    out.clear();
    cachedCl100k()->encode(text, out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_TiktokenResentConversation)->ArgName("mixed")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

void BM_CharacterEncode(benchmark::State& state) {
  if (!ready(state, false)) return;
  CharacterTokenizer tokenizer;
  runEncode(state, tokenizer, benchText());
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
