#include "index/block_hash.h"

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

std::vector<BlockHash> hashBlocks(std::span<const uint8_t> bytes, size_t block_size, uint64_t seed) {
  std::vector<BlockHash> out;
  hashBlocks(bytes, block_size, seed, out);
  return out;
}

}  // namespace prefixgate::index
