// The API key lookup of a refused request (issue 24): 2,000 keys and a presented token of 15 KB, as a hostile
// client sends it, before and after the digest lookup. "Scan" is the lookup as it was (the token compared with
// every key, each in constant time); "Digest" is ApiKeySet::find (one SHA-256 of the token, one hash map lookup);
// "Overlong" is a token longer than every key (refused unread). Built into prefixgate_bench; on its own:
//   build/bench/prefixgate_bench --benchmark_filter=ApiKey
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "auth/api_keys.h"

namespace prefixgate::auth {
namespace {

constexpr size_t kKeys = 2000;
constexpr size_t kTokenBytes = 15000;

std::vector<ApiKeySpec> keys(size_t bytes) {
  std::vector<ApiKeySpec> specs;
  for (size_t i = 0; i < kKeys; ++i) {
    std::string key = "sk-" + std::to_string(i);
    specs.push_back({"key-" + std::to_string(i), std::string(bytes - key.size(), 'k') + key, {}, {}, {}});
  }
  return specs;
}

// The old ApiKeySet::find: every key compared, no early exit.
const ApiKey* scan(const std::vector<std::shared_ptr<const ApiKey>>& all, std::string_view presented) {
  const ApiKey* found = nullptr;
  for (const auto& key : all)
    if (constantTimeEquals(presented, key->key)) found = key.get();
  return found;
}

void BM_ApiKeyScan(benchmark::State& state) {
  const size_t key_bytes = static_cast<size_t>(state.range(0));
  ApiKeySet set(keys(key_bytes), nullptr, 0);
  const std::string token(kTokenBytes, 'x');
  for (auto _ : state) benchmark::DoNotOptimize(scan(set.keys(), token));
}
BENCHMARK(BM_ApiKeyScan)->Arg(40)->Arg(kTokenBytes)->Unit(benchmark::kMicrosecond);

void BM_ApiKeyDigest(benchmark::State& state) {
  const size_t key_bytes = static_cast<size_t>(state.range(0));
  ApiKeySet set(keys(key_bytes), nullptr, 0);
  // Within the longest key's length, so it is digested (the worst case for the digest lookup).
  const std::string token(std::min(kTokenBytes, key_bytes), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(set.find(token));
}
BENCHMARK(BM_ApiKeyDigest)->Arg(40)->Arg(kTokenBytes)->Unit(benchmark::kMicrosecond);

void BM_ApiKeyOverlong(benchmark::State& state) {
  ApiKeySet set(keys(40), nullptr, 0);
  const std::string token(kTokenBytes, 'x');
  for (auto _ : state) benchmark::DoNotOptimize(set.find(token));
}
BENCHMARK(BM_ApiKeyOverlong)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace prefixgate::auth
