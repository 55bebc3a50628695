// Routing work of the prefix index: hashing a prompt into blocks, matching it against the candidate pods, and
// recording the chosen pod, for prompts of 8 KiB, 128 KiB and 1 MiB (block size 128, character tokenizer, so
// the prompt bytes are the tokens) and 8, 64 and 1,000 candidate pods, over an index pre-filled with 1,000,000
// blocks. "Cold" variants cycle through 64 distinct 1 MiB prompts so their blocks are out of cache. Figures go
// to docs/benchmarks.md. Built into prefixgate_bench; on its own:
//   g++ -O2 -DNDEBUG -std=c++20 -Iinclude -Isrc bench/index_bench.cpp build/libprefixgate_index.a
//       build/libprefixgate_base.a -lbenchmark -lbenchmark_main -lxxhash -lfmt -lpthread
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "index/block_hash.h"
#include "index/prefix_index.h"

namespace prefixgate::index {
namespace {

using namespace std::chrono_literals;

constexpr size_t kBlockSize = 128;
constexpr uint64_t kSeed = 0;
constexpr size_t kPrefilledBlocks = 1'000'000;
constexpr size_t kCapacity = size_t{1} << 21;  // room for the pre-fill and the cold prompts below
// Distinct 1 MiB prompts (8,192 blocks each, 512 Ki blocks in all) that the "Cold" benchmarks cycle through, so
// that each match finds its blocks out of cache, as a long prompt seen minutes ago would be.
constexpr size_t kColdPrompts = 64;
constexpr uint32_t kPods = 1000;
constexpr char kModel[] = "bench-model";

// A clock the benchmarks move by hand. Each routing iteration advances it by one touch tick, so every record
// refreshes and re-links its blocks in the LRU (the costly case; a prefix its pod already holds from the same
// tick is left alone).
class BenchClock final : public Clock {
 public:
  SteadyTime now() const override { return SteadyTime(std::chrono::nanoseconds(ns_.load(std::memory_order_relaxed))); }
  void advance(std::chrono::nanoseconds by) { ns_.fetch_add(by.count(), std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> ns_{0};
};

struct Fixture {
  BenchClock clock;
  std::unique_ptr<PrefixIndex> index;
  std::vector<uint8_t> prompt_1mib;
  std::vector<std::vector<uint8_t>> cold_prompts;
  std::vector<std::vector<BlockHash>> cold_hashes;

  Fixture() {
    // A long expiry: the fake clock advances 10 ms per iteration and nothing may expire during a run. Chained, as
    // the gateway's index is (its hashes come from hashBlocks; the random pre-fill hashes each stand at one place).
    index = std::make_unique<PrefixIndex>(PrefixIndexOptions{kCapacity, std::chrono::hours(24 * 100), 64, true},
                                          clock);
    std::mt19937_64 rng(42);
    std::vector<BlockHash> batch(128);
    for (size_t done = 0; done < kPrefilledBlocks; done += batch.size()) {
      for (BlockHash& h : batch) h = BlockHash{rng()};
      index->record(kModel, batch, PodId{static_cast<uint32_t>(rng() % kPods)});
    }
    prompt_1mib.resize(1 << 20);
    for (uint8_t& b : prompt_1mib) b = static_cast<uint8_t>(' ' + rng() % 90);
    // Pod 0 holds every block of the 1 MiB prompt (so of every shorter prefix of it), pod 1 the first half, so
    // a match walks the whole prompt: the longest walk, the worst case.
    const auto hashes = hashBlocks(prompt_1mib, kBlockSize, kSeed);
    index->record(kModel, hashes, PodId{0});
    index->record(kModel, std::span(hashes).first(hashes.size() / 2), PodId{1});
    for (size_t i = 0; i < kColdPrompts; ++i) {
      std::vector<uint8_t> cold(1 << 20);
      for (uint8_t& b : cold) b = static_cast<uint8_t>(' ' + rng() % 90);
      cold_hashes.push_back(hashBlocks(cold, kBlockSize, kSeed));
      index->record(kModel, cold_hashes.back(), PodId{static_cast<uint32_t>(i % 8)});
      cold_prompts.push_back(std::move(cold));
    }
  }

  std::span<const uint8_t> prompt(size_t kib) const { return std::span(prompt_1mib).first(kib * 1024); }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

std::vector<PodId> candidatesOf(size_t count) {
  std::vector<PodId> out;
  for (uint32_t p = 0; p < count; ++p) out.push_back(PodId{p});
  return out;
}

// Hashing alone: args = prompt KiB.
void BM_Hash(benchmark::State& state) {
  const auto prompt = fixture().prompt(static_cast<size_t>(state.range(0)));
  std::vector<BlockHash> hashes;
  hashes.reserve(prompt.size() / kBlockSize);
  for (auto _ : state) {
    hashes.clear();
    hashBlocks(prompt, kBlockSize, kSeed, hashes);
    benchmark::DoNotOptimize(hashes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prompt.size()));
}

// Hashing through index::BlockHashMemo (what routing does) against the plain hash. args = prompt KiB, then
// 0 = plain hash of fresh prompts, 1 = memo, fresh prompts (nothing in common with any remembered one: the
// memory's cost), 2 = plain hash of related prompts, 3 = memo, related prompts (64 prompts that share all but
// their last KiB, as a group's requests under one long system prompt or document do).
void BM_HashMemo(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) * 1024;
  const int64_t mode = state.range(1);
  const bool memoized = mode == 1 || mode == 3, related = mode >= 2;
  std::mt19937_64 rng(5);
  std::vector<uint8_t> head(bytes - 1024);
  for (uint8_t& b : head) b = static_cast<uint8_t>(rng());
  std::vector<std::vector<uint8_t>> prompts(256);
  for (auto& p : prompts) {
    p = related ? head : std::vector<uint8_t>(bytes - 1024);
    if (!related)
      for (uint8_t& b : p) b = static_cast<uint8_t>(rng());
    for (size_t i = 0; i < 1024; ++i) p.push_back(static_cast<uint8_t>(rng()));
  }
  BlockHashMemo memo;
  std::vector<BlockHash> hashes;
  hashes.reserve(bytes / kBlockSize);
  size_t next = 0;
  for (auto _ : state) {
    const auto& prompt = prompts[next++ % prompts.size()];
    hashes.clear();
    if (memoized) memo.hash(prompt, kBlockSize, kSeed, 0, hashes);
    else hashBlocksWithFirstExtra(prompt, kBlockSize, kSeed, 0, hashes);
    benchmark::DoNotOptimize(hashes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// match() alone, hashes precomputed: args = prompt KiB, candidates.
void BM_Match(benchmark::State& state) {
  Fixture& f = fixture();
  const auto hashes = hashBlocks(f.prompt(static_cast<size_t>(state.range(0))), kBlockSize, kSeed);
  const auto candidates = candidatesOf(static_cast<size_t>(state.range(1)));
  std::vector<uint32_t> matched(candidates.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.index->match(kModel, hashes, candidates, matched));
  }
  if (matched[0] != hashes.size()) state.SkipWithError("pod 0 should match the whole prompt");
  state.counters["blocks"] = static_cast<double>(hashes.size());
}

// The routing work of one request: hash + match + record of the chosen pod (a refresh: it holds the prompt).
// args = prompt KiB, candidates.
void BM_Route(benchmark::State& state) {
  Fixture& f = fixture();
  const auto prompt = f.prompt(static_cast<size_t>(state.range(0)));
  const auto candidates = candidatesOf(static_cast<size_t>(state.range(1)));
  std::vector<uint32_t> matched(candidates.size());
  std::vector<BlockHash> hashes;
  hashes.reserve(prompt.size() / kBlockSize);
  for (auto _ : state) {
    f.clock.advance(PrefixIndex::kTouchTick);
    hashes.clear();
    hashBlocks(prompt, kBlockSize, kSeed, hashes);
    f.index->match(kModel, hashes, candidates, matched);
    f.index->record(kModel, hashes, PodId{0});
  }
  if (matched[0] != hashes.size()) state.SkipWithError("pod 0 should match the whole prompt");
}

// match() alone over kColdPrompts different 1 MiB prompts in turn (blocks out of cache). args = candidates.
void BM_MatchCold(benchmark::State& state) {
  Fixture& f = fixture();
  const auto candidates = candidatesOf(static_cast<size_t>(state.range(0)));
  std::vector<uint32_t> matched(candidates.size());
  size_t next = 0;
  for (auto _ : state) {
    const auto& hashes = f.cold_hashes[next++ % kColdPrompts];
    if (f.index->match(kModel, hashes, candidates, matched) != hashes.size()) state.SkipWithError("partial match");
  }
}

// Hash + match + record over kColdPrompts different 1 MiB prompts in turn. args = candidates.
void BM_RouteCold(benchmark::State& state) {
  Fixture& f = fixture();
  const auto candidates = candidatesOf(static_cast<size_t>(state.range(0)));
  std::vector<uint32_t> matched(candidates.size());
  std::vector<BlockHash> hashes;
  size_t next = 0;
  for (auto _ : state) {
    const size_t i = next++ % kColdPrompts;
    f.clock.advance(PrefixIndex::kTouchTick);
    hashes.clear();
    hashBlocks(f.cold_prompts[i], kBlockSize, kSeed, hashes);
    f.index->match(kModel, hashes, candidates, matched);
    f.index->record(kModel, hashes, PodId{static_cast<uint32_t>(i % 8)});
  }
}

// record() of a prompt never seen before: every block is inserted and evicts the least recently updated one.
// args = prompt KiB.
void BM_RecordNew(benchmark::State& state) {
  Fixture& f = fixture();
  const auto base = hashBlocks(f.prompt(static_cast<size_t>(state.range(0))), kBlockSize, kSeed);
  std::vector<BlockHash> hashes(base.size());
  uint64_t variant = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ++variant;
    for (size_t i = 0; i < base.size(); ++i) hashes[i] = BlockHash{base[i].value ^ (variant * 0x9E3779B97F4A7C15ULL)};
    state.ResumeTiming();
    f.index->record(kModel, hashes, PodId{static_cast<uint32_t>(variant % kPods)});
  }
}

void routingArgs(benchmark::internal::Benchmark* b) {
  for (int64_t kib : {8, 128, 1024}) {
    for (int64_t pods : {8, 64, 1000}) b->Args({kib, pods});
  }
}

BENCHMARK(BM_Hash)->Arg(8)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_HashMemo)->ArgsProduct({{8, 256}, {0, 1, 2, 3}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Match)->Apply(routingArgs)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Match)->Args({8, 64})->Args({1024, 64})->Threads(2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Route)->Apply(routingArgs)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MatchCold)->Arg(8)->Arg(64)->Arg(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RouteCold)->Arg(8)->Arg(64)->Arg(1000)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RecordNew)->Arg(8)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace prefixgate::index
