#include "index/block_hash.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::index {
namespace {

std::span<const uint8_t> bytesOf(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

std::vector<uint64_t> values(const std::vector<BlockHash>& hashes) {
  std::vector<uint64_t> out;
  for (BlockHash h : hashes) out.push_back(h.value);
  return out;
}

// Ensures the chained XXH64 matches AIBrix's golden vectors for raw bytes.
TEST(BlockHash, GoldenVectorBytes) {
  const std::vector<uint8_t> bytes = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(values(hashBlocks(bytes, 4, 0)), (std::vector<uint64_t>{0xed2904c594e558d1ULL, 0x7d9bd50ec50644c0ULL}));
}

// Ensures the chained XXH64 matches AIBrix's golden vectors for text.
TEST(BlockHash, GoldenVectorText) {
  EXPECT_EQ(values(hashBlocks(bytesOf("abcdefgh"), 4, 0)),
            (std::vector<uint64_t>{0xe47f32a254016b00ULL, 0xd48dd7253a12cb4bULL}));
}

// Ensures the seed is both the first parent and the XXH64 seed, as in AIBrix.
TEST(BlockHash, GoldenVectorSeeded) {
  EXPECT_EQ(values(hashBlocks(bytesOf("abcdefgh"), 4, 42)),
            (std::vector<uint64_t>{0xc785304b0ea77c8fULL, 0xa835bbc075607fa3ULL}));
}

// Ensures changing block 2 of 4 changes blocks 2..4 (the chain) and leaves block 1 alone.
TEST(BlockHash, ChangeBreaksTheChainFromThatBlockOn) {
  const auto original = hashBlocks(bytesOf("aaaabbbbccccdddd"), 4, 0);
  const auto changed = hashBlocks(bytesOf("aaaaXbbbccccdddd"), 4, 0);
  ASSERT_EQ(original.size(), 4u);
  ASSERT_EQ(changed.size(), 4u);
  EXPECT_EQ(original[0], changed[0]);
  for (size_t i = 1; i < 4; ++i) EXPECT_NE(original[i], changed[i]) << "block " << i;
}

// Ensures identical blocks at different positions hash differently (each hash covers its whole prefix).
TEST(BlockHash, RepeatedBlockContentDiffersByPosition) {
  const auto hashes = hashBlocks(bytesOf("abcdabcd"), 4, 0);
  ASSERT_EQ(hashes.size(), 2u);
  EXPECT_NE(hashes[0], hashes[1]);
}

// Ensures a trailing partial block is ignored and does not alter the full blocks.
TEST(BlockHash, TrailingPartialBlockDropped) {
  const auto full = hashBlocks(bytesOf("abcdefgh"), 4, 0);
  const auto with_tail = hashBlocks(bytesOf("abcdefghij"), 4, 0);
  EXPECT_EQ(with_tail, full);
  EXPECT_EQ(fullBlockCount(10, 4), 2u);
}

// Ensures empty input, input shorter than a block and block size 0 yield no hashes.
TEST(BlockHash, EmptyAndShortInputsYieldNothing) {
  EXPECT_TRUE(hashBlocks(bytesOf(""), 4, 0).empty());
  EXPECT_TRUE(hashBlocks(bytesOf("abc"), 4, 0).empty());
  EXPECT_TRUE(hashBlocks(bytesOf("abcdefgh"), 0, 0).empty());
}

// Ensures the appending overload appends after existing content and agrees with the returning one.
TEST(BlockHash, AppendingOverloadAppends) {
  std::vector<BlockHash> out = {BlockHash{7}};
  EXPECT_EQ(hashBlocks(bytesOf("abcdefgh"), 4, 0, out), 2u);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].value, 7u);
  EXPECT_EQ(out[1].value, 0xe47f32a254016b00ULL);
  EXPECT_EQ(out[2].value, 0xd48dd7253a12cb4bULL);
}

// The definition written out plainly (concatenation on the heap), to check the optimised paths against.
std::vector<uint64_t> referenceHashes(const std::vector<uint8_t>& bytes, size_t block_size, uint64_t seed) {
  std::vector<uint64_t> out;
  uint64_t parent = seed;
  for (size_t start = 0; start + block_size <= bytes.size(); start += block_size) {
    std::vector<uint8_t> data(8);
    for (size_t i = 0; i < 8; ++i) data[i] = static_cast<uint8_t>(parent >> (8 * i));
    data.insert(data.end(), bytes.begin() + start, bytes.begin() + start + block_size);
    parent = XXH64(data.data(), data.size(), seed);
    out.push_back(parent);
  }
  return out;
}

// Ensures both XXH64 paths (messages under one 32-byte stripe, and striped ones with every tail length) follow
// the definition, checked against libxxhash.
TEST(BlockHash, EveryBlockSizeFollowsTheDefinition) {
  std::vector<uint8_t> bytes(5000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
  for (size_t block_size :
       {1, 2, 3, 4, 5, 7, 8, 12, 16, 23, 24, 25, 31, 32, 33, 40, 64, 100, 128, 129, 511, 513, 4096}) {
    EXPECT_EQ(values(hashBlocks(bytes, block_size, 99)), referenceHashes(bytes, block_size, 99))
        << "block size " << block_size;
  }
}

// Ensures a chain hashed in two pieces split at a block boundary, the second continued after the first's last hash,
// equals the chain of the whole, for short and striped block sizes.
TEST(BlockHash, ContinuingAChainEqualsHashingTheWhole) {
  std::vector<uint8_t> bytes(64 * 7);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
  for (size_t block : {16u, 64u}) {
    const std::vector<BlockHash> whole = hashBlocks(bytes, block, 42);
    std::vector<BlockHash> pieces;
    hashBlocks(std::span(bytes).first(2 * block), block, 42, pieces);
    hashBlocksAfter(pieces.back(), std::span(bytes).subspan(2 * block), block, 42, pieces);
    EXPECT_EQ(pieces, whole) << "block size " << block;
    std::vector<BlockHash> from_seed;
    hashBlocksAfter(BlockHash{42}, bytes, block, 42, from_seed);
    EXPECT_EQ(from_seed, whole);
  }
}


// Ensures a first block's extra keys change every hash of the chain (the rest chain from the mixed first), nothing
// mixed gives hashBlocks itself, and equal extras agree.
TEST(BlockHash, FirstBlockExtraKeysChangeTheWholeChain) {
  const std::string text(40, 'x');
  std::vector<BlockHash> plain, salted, again, other;
  hashBlocksWithFirstExtra(bytesOf(text), 16, 7, 0, plain);
  EXPECT_EQ(plain, hashBlocks(bytesOf(text), 16, 7));
  EXPECT_EQ(hashBlocksWithFirstExtra(bytesOf(text), 16, 7, 42, salted), 2u);
  hashBlocksWithFirstExtra(bytesOf(text), 16, 7, 42, again);
  hashBlocksWithFirstExtra(bytesOf(text), 16, 7, 43, other);
  ASSERT_EQ(salted.size(), 2u);
  EXPECT_EQ(salted[0].value, mixExtra(plain[0].value, 42));
  EXPECT_NE(salted[1], plain[1]);
  std::vector<BlockHash> rest;
  hashBlocksAfter(salted[0], bytesOf(text).subspan(16), 16, 7, rest);
  EXPECT_EQ(rest[0], salted[1]);  // the chain goes on from the mixed hash
  EXPECT_EQ(salted, again);
  EXPECT_NE(salted[0], other[0]);
  EXPECT_NE(salted[1], other[1]);
  std::vector<BlockHash> short_prompt;
  EXPECT_EQ(hashBlocksWithFirstExtra(bytesOf("abc"), 16, 7, 42, short_prompt), 0u);
}
}  // namespace
}  // namespace prefixgate::index
