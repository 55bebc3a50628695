// The token cache's bounds: entries and bytes (token ids plus each entry's bookkeeping), least recently used first
// out. Lookups, the entry bound and threads: tests/unit/core/tokenize/remote_tokenizer_test.cpp.
#include "tokenize/token_cache.h"

#include <gtest/gtest.h>

namespace prefixgate::tokenize {
namespace {

TokenCache::Tokens ids(size_t n) { return std::make_shared<const std::vector<uint32_t>>(n, 7u); }

// Ensures the byte bound evicts least recently used entries, counts each entry's ids and bookkeeping, refuses an
// entry larger than the bound, and counts a replaced entry's new size only.
TEST(TokenCache, BoundedByBytes) {
  TokenCache cache(100, 1, TokenCache::entryBytes(4) * 2 + TokenCache::entryBytes(2));
  cache.insert(1, ids(4));
  cache.insert(2, ids(4));
  EXPECT_EQ(cache.bytes(), 2 * TokenCache::entryBytes(4));
  ASSERT_NE(cache.find(1), nullptr);  // 1 is now the most recently used
  cache.insert(3, ids(4));            // over the bound: drops 2
  EXPECT_EQ(cache.find(2), nullptr);
  EXPECT_NE(cache.find(1), nullptr);
  EXPECT_NE(cache.find(3), nullptr);
  EXPECT_EQ(cache.bytes(), 2 * TokenCache::entryBytes(4));
  cache.insert(4, ids(1000));  // larger than the whole bound: not kept, nothing dropped
  EXPECT_EQ(cache.find(4), nullptr);
  EXPECT_EQ(cache.size(), 2u);
  cache.insert(1, ids(60));  // replacing an entry counts its new size only: 3 goes
  EXPECT_NE(cache.find(1), nullptr);
  EXPECT_EQ(cache.find(3), nullptr);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.bytes(), TokenCache::entryBytes(60));
}

// Ensures many large answers (issue 24: 100 distinct 2 MiB prompts held 240 MB under an entry bound alone) keep
// the cache's bytes under its budget at every step, the least recently used going first, and a recently read one
// kept; with the default sixteen shards as well.
TEST(TokenCache, LargeEntriesStayWithinTheByteBudget) {
  constexpr size_t kBudget = size_t{64} << 20;
  constexpr size_t kTokens = 512 * 1024;  // 2 MiB of ids
  TokenCache cache(10000, 1, kBudget);
  for (uint64_t key = 0; key < 100; ++key) {
    cache.insert(key, ids(kTokens));
    ASSERT_LE(cache.bytes(), kBudget) << "after " << key + 1 << " entries";
    if (key >= 1) {
      ASSERT_NE(cache.find(1), nullptr) << "a recently read entry is kept";
    }
  }
  const size_t fit = kBudget / TokenCache::entryBytes(kTokens);
  EXPECT_EQ(cache.size(), fit);
  EXPECT_EQ(cache.bytes(), fit * TokenCache::entryBytes(kTokens));
  EXPECT_EQ(cache.find(0), nullptr);   // the oldest went first
  EXPECT_EQ(cache.find(2), nullptr);
  EXPECT_NE(cache.find(99), nullptr);  // the newest stay
  EXPECT_NE(cache.find(100 - fit + 1), nullptr);

  TokenCache sharded(10000, TokenCache::kDefaultShards, kBudget);
  for (uint64_t key = 0; key < 100; ++key) sharded.insert(key * 0x9E3779B97F4A7C15ULL, ids(kTokens));
  EXPECT_LE(sharded.bytes(), kBudget);
  EXPECT_GT(sharded.size(), 0u);
}

}  // namespace
}  // namespace prefixgate::tokenize
