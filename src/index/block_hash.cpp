#include "index/block_hash.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace prefixgate::index {
namespace {

// XXH64 (github.com/Cyan4973/xxHash, doc/xxhash_spec.md) of the virtual message LE_u64(parent) ++ block, read
// straight from the prompt: no concatenation buffer, no copy, any block size. Checked bit for bit against
// libxxhash by the unit tests.
constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;
constexpr size_t kParentBytes = sizeof(uint64_t);
constexpr size_t kStripeBytes = 32;

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

inline uint64_t round(uint64_t acc, uint64_t input) {
  acc += input * kPrime2;
  acc = std::rotl(acc, 31);
  return acc * kPrime1;
}

inline uint64_t mergeRound(uint64_t acc, uint64_t value) {
  acc ^= round(0, value);
  return acc * kPrime1 + kPrime4;
}

// XXH64's tail (the last 0-31 bytes) and final avalanche, shared by the striped and the short paths.
uint64_t finishTail(uint64_t h, const uint8_t* p, const uint8_t* end) {
  for (; p + 8 <= end; p += 8) {
    h ^= round(0, load64(p));
    h = std::rotl(h, 27) * kPrime1 + kPrime4;
  }
  if (p + 4 <= end) {
    h ^= static_cast<uint64_t>(load32(p)) * kPrime1;
    h = std::rotl(h, 23) * kPrime2 + kPrime3;
    p += 4;
  }
  for (; p < end; ++p) {
    h ^= static_cast<uint64_t>(*p) * kPrime5;
    h = std::rotl(h, 11) * kPrime1;
  }
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

// Hashes LE(parent) ++ block[0, size). `size` >= 24, so the message has at least one full 32-byte stripe.
uint64_t hashChained(uint64_t parent, const uint8_t* block, size_t size, uint64_t seed) {
  const size_t total = kParentBytes + size;
  uint64_t v1 = seed + kPrime1 + kPrime2;
  uint64_t v2 = seed + kPrime2;
  uint64_t v3 = seed;
  uint64_t v4 = seed - kPrime1;
  // Stripe 0 is the parent and the block's first 24 bytes; the next stripes come from the block alone.
  v1 = round(v1, parent);
  v2 = round(v2, load64(block));
  v3 = round(v3, load64(block + 8));
  v4 = round(v4, load64(block + 16));
  const uint8_t* p = block + (kStripeBytes - kParentBytes);
  const uint8_t* const stripes_end = block + (total / kStripeBytes) * kStripeBytes - kParentBytes;
  for (; p < stripes_end; p += kStripeBytes) {
    v1 = round(v1, load64(p));
    v2 = round(v2, load64(p + 8));
    v3 = round(v3, load64(p + 16));
    v4 = round(v4, load64(p + 24));
  }
  uint64_t h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
  h = mergeRound(h, v1);
  h = mergeRound(h, v2);
  h = mergeRound(h, v3);
  h = mergeRound(h, v4);
  h += total;
  const uint8_t* const end = block + size;
  return finishTail(h, p, end);
}

// Blocks of under 24 bytes (tests, tiny block sizes) make a message shorter than one stripe; they are rare, so
// they go through a stack copy and the short-input path of the same algorithm.
uint64_t hashShort(uint64_t parent, const uint8_t* block, size_t size, uint64_t seed) {
  uint8_t message[kStripeBytes];
  for (size_t i = 0; i < kParentBytes; ++i) message[i] = static_cast<uint8_t>(parent >> (8 * i));
  std::memcpy(message + kParentBytes, block, size);
  const size_t total = kParentBytes + size;
  uint64_t h = seed + kPrime5 + total;
  const uint8_t* p = message;
  const uint8_t* const end = message + total;
  return finishTail(h, p, end);
}

constexpr size_t kMinStripedBlock = kStripeBytes - kParentBytes;

}  // namespace

size_t hashBlocks(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed, std::vector<BlockHash>& out) {
  return hashBlocksAfter(BlockHash{seed}, bytes, block_size, seed, out);
}

size_t hashBlocksAfter(BlockHash parent_block, std::span<const uint8_t> bytes, size_t block_size, uint64_t seed,
                       std::vector<BlockHash>& out) {
  const size_t count = fullBlockCount(bytes.size(), block_size);
  if (count == 0) return 0;
  const size_t first = out.size();
  out.resize(first + count);
  BlockHash* dst = out.data() + first;
  const uint8_t* src = bytes.data();
  uint64_t parent = parent_block.value;
  if (block_size >= kMinStripedBlock) {
    for (size_t i = 0; i < count; ++i, src += block_size) {
      parent = hashChained(parent, src, block_size, seed);
      dst[i] = BlockHash{parent};
    }
  } else {
    for (size_t i = 0; i < count; ++i, src += block_size) {
      parent = hashShort(parent, src, block_size, seed);
      dst[i] = BlockHash{parent};
    }
  }
  return count;
}

size_t hashBlocksWithFirstExtra(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed,
                                uint64_t first_extra, std::vector<BlockHash>& out) {
  if (first_extra == 0 || fullBlockCount(bytes.size(), block_size) == 0)
    return hashBlocksAfter(BlockHash{seed}, bytes, block_size, seed, out);
  hashBlocksAfter(BlockHash{seed}, bytes.first(block_size), block_size, seed, out);
  out.back() = BlockHash{mixExtra(out.back().value, first_extra)};
  return 1 + hashBlocksAfter(out.back(), bytes.subspan(block_size), block_size, seed, out);
}

namespace {

// How many whole blocks `a` and `b` share from the start (of the first `blocks` blocks of each).
size_t sharedBlocks(const uint8_t* a, const uint8_t* b, size_t blocks, size_t block_size) {
  if (std::memcmp(a, b, blocks * block_size) == 0) return blocks;  // one prompt extends the other: the usual case
  size_t i = 0;
  while (i < blocks && std::memcmp(a + i * block_size, b + i * block_size, block_size) == 0) ++i;
  return i;
}

}  // namespace

size_t BlockHashMemo::hash(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed, uint64_t first_extra,
                           std::vector<BlockHash>& out) {
  last_reused_ = 0;
  const size_t count = fullBlockCount(bytes.size(), block_size);
  if (count == 0) return 0;
  const size_t first = out.size();
  // The first block is hashed in any case: its hash picks the remembered prompts that can share anything.
  hashBlocksWithFirstExtra(bytes.first(block_size), block_size, seed, first_extra, out);
  const BlockHash head = out[first];
  Entry* best = nullptr;
  size_t best_shared = 0;
  Entry* oldest = &entries_[0];
  for (Entry& e : entries_) {
    if (e.last_use < oldest->last_use) oldest = &e;
    if (e.hashes.empty() || e.hashes.front() != head || e.block_size != block_size || e.seed != seed ||
        e.first_extra != first_extra)
      continue;
    const size_t limit = std::min(count, e.hashes.size());
    if (limit <= best_shared) continue;
    // Prompts under one system prompt often share its blocks: once one remembered prompt is known to share
    // `best_shared` blocks, another shares at least as many exactly when its chain hash at that block is the
    // same (a chain hash stands for its whole prefix), and only its blocks after them are compared.
    size_t from = 0;
    if (best_shared > 0) {
      if (e.hashes[best_shared - 1] != best->hashes[best_shared - 1]) continue;
      from = best_shared;
    }
    const size_t shared = from + sharedBlocks(bytes.data() + from * block_size, e.bytes.data() + from * block_size,
                                              limit - from, block_size);
    if (shared > best_shared) {
      best = &e;
      best_shared = shared;
    }
  }
  if (best_shared > 1) {
    out.insert(out.end(), best->hashes.begin() + 1, best->hashes.begin() + static_cast<ptrdiff_t>(best_shared));
    last_reused_ = best_shared - 1;
  }
  const size_t done = std::max<size_t>(best_shared, 1);
  if (done < count) hashBlocksAfter(out.back(), bytes.subspan(done * block_size), block_size, seed, out);
  // Remember this prompt: in place of the one it extends (the conversation's previous turn), else of the oldest.
  const size_t keep = std::min(count, kMaxRememberedBytes / block_size);
  Entry& slot = best != nullptr && best_shared == best->hashes.size() && keep >= best_shared ? *best : *oldest;
  if (keep > 0) {
    // Extending the remembered prompt in place copies only its new blocks.
    const size_t known = &slot == best ? best_shared : 0;
    slot.block_size = block_size;
    slot.seed = seed;
    slot.first_extra = first_extra;
    slot.last_use = ++uses_;
    slot.bytes.resize(known * block_size);
    slot.bytes.insert(slot.bytes.end(), bytes.begin() + static_cast<ptrdiff_t>(known * block_size),
                      bytes.begin() + static_cast<ptrdiff_t>(keep * block_size));
    slot.hashes.resize(known);
    slot.hashes.insert(slot.hashes.end(), out.begin() + static_cast<ptrdiff_t>(first + known),
                       out.begin() + static_cast<ptrdiff_t>(first + keep));
  }
  if (best != nullptr && best != &slot) best->last_use = ++uses_;
  return count;
}

std::vector<BlockHash> hashBlocks(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed) {
  std::vector<BlockHash> out;
  hashBlocks(bytes, block_size, seed, out);
  return out;
}

}  // namespace prefixgate::index
