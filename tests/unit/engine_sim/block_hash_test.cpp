#include "engine_sim/block_hash.h"

#include <gtest/gtest.h>
#include <numeric>

namespace prefixgate::sim {
namespace {

std::vector<uint32_t> sequence(size_t count, uint32_t first = 0) {
  std::vector<uint32_t> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// Ensures only full blocks are hashed: a trailing partial block is never cached.
TEST(BlockHash, OnlyFullBlocks) {
  EXPECT_TRUE(blockHashes(sequence(15), 16).empty());
  EXPECT_EQ(blockHashes(sequence(16), 16).size(), 1u);
  EXPECT_EQ(blockHashes(sequence(47), 16).size(), 2u);
  EXPECT_TRUE(blockHashes(sequence(47), 0).empty());
}

// Ensures each block's hash chains its parent's: the first block's hash is the root-chained hash of its tokens.
TEST(BlockHash, ChainsParentHash) {
  std::vector<uint32_t> tokens = sequence(32);
  std::vector<EngineBlockHash> hashes = blockHashes(tokens, 16);
  ASSERT_EQ(hashes.size(), 2u);
  std::span<const uint32_t> all(tokens);
  EXPECT_EQ(hashes[0], chainBlockHash(kRootBlockHash, all.subspan(0, 16)));
  EXPECT_EQ(hashes[1], chainBlockHash(hashes[0], all.subspan(16, 16)));
  // The same tokens under another parent hash differently.
  EXPECT_NE(hashes[1], chainBlockHash(kRootBlockHash, all.subspan(16, 16)));
}

// Ensures a changed early block changes every later block's hash, while earlier blocks keep theirs.
TEST(BlockHash, EarlyChangePropagates) {
  std::vector<uint32_t> tokens = sequence(64);
  std::vector<EngineBlockHash> before = blockHashes(tokens, 16);
  tokens[20] ^= 1;  // inside block 1
  std::vector<EngineBlockHash> after = blockHashes(tokens, 16);
  ASSERT_EQ(after.size(), 4u);
  EXPECT_EQ(after[0], before[0]);
  for (size_t i = 1; i < after.size(); ++i) EXPECT_NE(after[i], before[i]) << "block " << i;
}

// Ensures equal prompts give equal hashes (deterministic across calls).
TEST(BlockHash, Deterministic) {
  EXPECT_EQ(blockHashes(sequence(48, 7), 16), blockHashes(sequence(48, 7), 16));
}

}  // namespace
}  // namespace prefixgate::sim
