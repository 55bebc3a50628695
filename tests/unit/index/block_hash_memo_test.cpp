// index::BlockHashMemo: every answer equals hashBlocksWithFirstExtra's, whatever the memory holds (prompts that
// extend, branch from or differ from the remembered ones; other seeds, block sizes and first extras; more prompts
// than it remembers; prompts longer than it remembers; appending to a non-empty vector), and a prompt that begins
// with a remembered one hashes only the blocks after the shared ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "index/block_hash.h"

namespace prefixgate::index {
namespace {

std::span<const uint8_t> bytesOf(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

std::vector<BlockHash> direct(const std::string& text, size_t block, uint64_t seed, uint64_t extra) {
  std::vector<BlockHash> out;
  hashBlocksWithFirstExtra(bytesOf(text), block, seed, extra, out);
  return out;
}

std::vector<BlockHash> memoized(BlockHashMemo& memo, const std::string& text, size_t block, uint64_t seed,
                                uint64_t extra) {
  std::vector<BlockHash> out;
  EXPECT_EQ(memo.hash(bytesOf(text), block, seed, extra, out), text.size() / block);
  return out;
}

std::string randomText(std::mt19937_64& rng, size_t size) {
  std::string s(size, ' ');
  for (char& c : s) c = static_cast<char>('a' + rng() % 4);  // a small alphabet: branches share whole blocks
  return s;
}

TEST(BlockHashMemo, AConversationsNextTurnHashesOnlyItsNewBlocks) {
  BlockHashMemo memo;
  std::mt19937_64 rng(7);
  const std::string system = randomText(rng, 4096);
  const std::string turn1 = system + randomText(rng, 1000);
  EXPECT_EQ(memoized(memo, turn1, 128, 0, 0), direct(turn1, 128, 0, 0));
  EXPECT_EQ(memo.lastReused(), 0u);  // nothing remembered yet
  const std::string turn2 = turn1 + randomText(rng, 700);
  EXPECT_EQ(memoized(memo, turn2, 128, 0, 0), direct(turn2, 128, 0, 0));
  EXPECT_EQ(memo.lastReused(), turn1.size() / 128 - 1) << "every full block of the previous turn but the first";
  // Another conversation under the same system prompt shares the system prompt's blocks.
  const std::string other = system + randomText(rng, 2000);
  EXPECT_EQ(memoized(memo, other, 128, 0, 0), direct(other, 128, 0, 0));
  EXPECT_EQ(memo.lastReused(), system.size() / 128 - 1);
}

TEST(BlockHashMemo, NothingIsSharedAcrossSeedsBlockSizesOrExtras) {
  BlockHashMemo memo;
  std::mt19937_64 rng(8);
  const std::string text = randomText(rng, 3000);
  EXPECT_EQ(memoized(memo, text, 128, 0, 0), direct(text, 128, 0, 0));
  EXPECT_EQ(memoized(memo, text, 128, 1, 0), direct(text, 128, 1, 0));
  EXPECT_EQ(memo.lastReused(), 0u);
  EXPECT_EQ(memoized(memo, text, 128, 0, 99), direct(text, 128, 0, 99));
  EXPECT_EQ(memo.lastReused(), 0u);
  EXPECT_EQ(memoized(memo, text, 64, 0, 0), direct(text, 64, 0, 0));
  EXPECT_EQ(memo.lastReused(), 0u);
  EXPECT_EQ(memoized(memo, text, 128, 0, 0), direct(text, 128, 0, 0));
  EXPECT_EQ(memo.lastReused(), text.size() / 128 - 1);
}

TEST(BlockHashMemo, EqualsTheDirectHashOnRandomFamiliesOfPrompts) {
  BlockHashMemo memo;
  std::mt19937_64 rng(9);
  std::vector<std::string> family;
  size_t reused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const size_t pick = rng() % 5;
    if (family.empty() || pick == 0) {
      text = randomText(rng, rng() % 6000);  // a new prompt (sometimes shorter than a block)
    } else {
      const std::string& base = family[rng() % family.size()];
      text = base.substr(0, base.empty() ? 0 : rng() % base.size()) + randomText(rng, rng() % 3000);
    }
    if (family.size() < 40) family.push_back(text);
    else family[rng() % family.size()] = text;
    const size_t block = (rng() % 8 == 0) ? 16 + rng() % 200 : 128;
    const uint64_t seed = rng() % 3, extra = rng() % 4 == 0 ? rng() : 0;
    std::vector<BlockHash> out = {BlockHash{12345}};  // appends after what the vector holds
    memo.hash(bytesOf(text), block, seed, extra, out);
    std::vector<BlockHash> expected = {BlockHash{12345}};
    hashBlocksWithFirstExtra(bytesOf(text), block, seed, extra, expected);
    ASSERT_EQ(out, expected) << "prompt " << i << ", " << text.size() << " bytes, block " << block;
    reused += memo.lastReused();
  }
  EXPECT_GT(reused, 1000u) << "the families share prefixes: the memory should have served many blocks";
}

TEST(BlockHashMemo, APromptLongerThanItRemembersStillHashesRight) {
  BlockHashMemo memo;
  std::mt19937_64 rng(10);
  const std::string longer = randomText(rng, BlockHashMemo::kMaxRememberedBytes + 5000);
  EXPECT_EQ(memoized(memo, longer, 128, 0, 0), direct(longer, 128, 0, 0));
  const std::string next = longer + randomText(rng, 300);
  EXPECT_EQ(memoized(memo, next, 128, 0, 0), direct(next, 128, 0, 0));
  EXPECT_EQ(memo.lastReused(), BlockHashMemo::kMaxRememberedBytes / 128 - 1) << "its remembered head is reused";
}

TEST(BlockHashMemo, ForgetsTheLeastRecentlyUsedPrompt) {
  BlockHashMemo memo;
  std::mt19937_64 rng(11);
  std::vector<std::string> prompts;
  for (size_t i = 0; i <= BlockHashMemo::kEntries; ++i) prompts.push_back(randomText(rng, 1024));
  for (size_t i = 0; i < BlockHashMemo::kEntries; ++i) memoized(memo, prompts[i], 128, 0, 0);
  memoized(memo, prompts[0], 128, 0, 0);  // used again: now the most recent
  EXPECT_EQ(memo.lastReused(), 7u);
  memoized(memo, prompts[BlockHashMemo::kEntries], 128, 0, 0);  // takes the place of prompts[1], the oldest
  memoized(memo, prompts[0], 128, 0, 0);
  EXPECT_EQ(memo.lastReused(), 7u);
  memoized(memo, prompts[1], 128, 0, 0);
  EXPECT_EQ(memo.lastReused(), 0u);
}

}  // namespace
}  // namespace prefixgate::index
