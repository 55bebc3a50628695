#pragma once
// Chained block hashes of a tokenized prompt, bit-compatible with AIBrix's standard mode so that replicas of
// either gateway sharing one hash seed agree on every block.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::index {

// Hashes every FULL block of `bytes` (the trailing partial block is ignored, so a prompt shorter than one block
// yields no hashes):
//   parent = seed; for each full block b: h = XXH64(LE_u64(parent) ++ b, seed); emit h; parent = h
// Because each hash covers its parent, a block hash identifies the whole prefix up to and including that block.
// A block_size of 0 yields no hashes. Pure function; thread-safe; no allocation beyond the returned vector.
std::vector<BlockHash> hashBlocks(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed);

// Same, but appends to `out` (which is not cleared), so a caller that reuses its vector allocates nothing in the
// steady state. Returns the number of hashes appended.
size_t hashBlocks(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed, std::vector<BlockHash>& out);

// Same, continuing a chain: the first block's parent is `parent` instead of the seed. hashBlocks(b, n, seed) ==
// hashBlocksAfter(BlockHash{seed}, b, n, seed), and hashing a buffer in two pieces that split at a block boundary,
// the second after the last hash of the first, gives the hashes of the whole. KV-event mode re-hashes an engine's
// stored blocks this way, each event chained to the block before it.
size_t hashBlocksAfter(BlockHash parent, std::span<const uint8_t> bytes, size_t block_size, uint64_t seed,
                       std::vector<BlockHash>& out);

// Mixes `extra` (a digest of what besides tokens tells a block apart: a KV event's extra keys, a request's
// cache_salt, a model's name) into a block hash: equal inputs give equal outputs, and a block with something mixed
// in never equals one without (short of a 64-bit collision).
constexpr uint64_t mixExtra(uint64_t hash, uint64_t extra) {
  uint64_t x = hash ^ (extra * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ULL;
  return x ^ (x >> 29);
}

// hashBlocks with the first block's extra keys: its hash is mixed with `first_extra` (0 = nothing: hashBlocks
// itself) and the chain goes on from the mixed hash, so every block of the prompt differs from the unsalted one's.
// What vLLM does with a request's cache_salt (an extra key of the first block only), and what KV event mode does
// with the extra keys a BlockStored event gives per block. Appends to `out`; returns the number appended.
size_t hashBlocksWithFirstExtra(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed,
                                uint64_t first_extra, std::vector<BlockHash>& out);

// Number of full blocks in a buffer of `byte_count` bytes (what hashBlocks would emit).
constexpr size_t fullBlockCount(size_t byte_count, size_t block_size) {
  return block_size == 0 ? 0 : byte_count / block_size;
}

// hashBlocksWithFirstExtra with a memory of the last prompts it hashed (their bytes and chains), so that a prompt
// beginning with the same full blocks as one of them (the next turn of a conversation, another request under the
// same system prompt or document) hashes only the blocks after the shared ones: comparing a 128-byte block costs
// a few nanoseconds, XXH64's chained hash of it about 80 cycles on the decision's critical path. The hashes are
// exactly hashBlocksWithFirstExtra's (the same bytes under the same seed, block size and first extra give the
// same chain), with one assumption the prefix index already makes: a second remembered prompt whose chain hash
// equals the best one's at the shared length is taken to share those blocks without comparing them (a 64-bit
// chain collision would copy its earlier hashes). Not thread-safe: one per thread (routing keeps a thread_local
// one). Memory: at most kEntries prompts of at most kMaxRememberedBytes each (a longer prompt's first
// kMaxRememberedBytes are remembered), so about 1 MiB per thread at most. Its cost on a prompt that shares
// nothing: a copy of its first kMaxRememberedBytes (docs/benchmarks.md, "The decision's hashing").
class BlockHashMemo {
 public:
  static constexpr size_t kEntries = 16;
  static constexpr size_t kMaxRememberedBytes = 64 * 1024;

  // Appends the hashes of `bytes`' full blocks to `out`, as hashBlocksWithFirstExtra; returns the number appended.
  size_t hash(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed, uint64_t first_extra,
              std::vector<BlockHash>& out);
  // Blocks of the last hash() taken from a remembered prompt instead of hashed (the first is always hashed).
  size_t lastReused() const { return last_reused_; }

 private:
  struct Entry {
    size_t block_size = 0;
    uint64_t seed = 0;
    uint64_t first_extra = 0;
    uint64_t last_use = 0;
    std::vector<uint8_t> bytes;    // whole blocks only
    std::vector<BlockHash> hashes;  // one per block of `bytes`
  };
  std::array<Entry, kEntries> entries_;
  uint64_t uses_ = 0;
  size_t last_reused_ = 0;
};

}  // namespace prefixgate::index
