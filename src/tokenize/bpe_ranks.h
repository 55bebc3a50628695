#pragma once
// The merge ranks of a byte-level BPE vocabulary (byte string -> rank, which is also the token id), and the
// byte-pair merge that turns one pre-tokenized piece into token ids exactly as tiktoken does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenize/token_bytes.h"

namespace prefixgate::tokenize {

using Rank = uint32_t;
inline constexpr Rank kNoRank = 0xFFFFFFFF;

// Immutable after build(); every const method is safe to call from many threads at once.
// Two open-addressing tables rather than one std::unordered_map: keys of up to 7 bytes (nearly all lookups made
// while merging) are packed into one integer and compared in one instruction; longer keys live in one arena.
// Both tables (about 5 MB) miss the cache on random keys, and most lookups made while merging CJK or other
// multi-byte text are of spans that are no token (a character and part of the next), so a one-bit-per-hash
// filter of every token (256 KiB, which stays in cache) answers those without touching the tables.
class BpeRanks {
 public:
  struct Entry {
    std::string bytes;
    Rank rank;
  };

  // Fails (naming the problem in error) on an empty or duplicate byte string, a rank equal to kNoRank, or a
  // vocabulary that lacks one of the 256 single bytes (every text must be encodable).
  bool build(const std::vector<Entry>& entries, std::string& error);

  Rank find(const uint8_t* bytes, size_t length) const {
    if (length > kMaxPackedLength) return findLong(bytes, length);
    const uint64_t key = pack(bytes, length);
    return mayContain(key * kFilterMultiplier) ? findPacked(key) : kNoRank;
  }
  Rank find(std::string_view bytes) const {
    return find(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  Rank byteRank(uint8_t b) const { return byte_ranks_[b]; }
  // The rank of the two bytes a, b joined: the first lookups of every merge, served from a flat table.
  Rank pairRank(uint8_t a, uint8_t b) const { return pair_ranks_[(size_t{a} << 8) | b]; }
  size_t size() const { return size_; }

  // False when no token can ever contain both p[x] and p[x + 1] of the piece p[0, n) (x + 1 < n): the byte-pair
  // merge then never joins across that boundary, so the parts on either side merge independently (bytePairEncode
  // cuts every piece it merges there). A token that spans the boundary is either exactly the pair p[x, x + 2) or longer, and
  // then holds p[x - 1, x + 2) or p[x, x + 3); so the answer is false when the pair occurs in no token, or when it
  // is no token itself and neither neighbouring triple occurs in one. May answer true for a boundary that can never
  // be crossed (the triple filter hashes), never false for one that can. Three bit tests in 80 KiB that stay in
  // cache, where a probe of a span across the boundary would test the 256 KiB token filter.
  bool mayJoinAcross(const uint8_t* p, size_t x, size_t n) const {
    const size_t pair = (size_t{p[x]} << 8) | p[x + 1];
    if (!testBit(pair_in_token_, pair)) return false;
    if (testBit(pair_is_token_, pair)) return true;
    return (x > 0 && mayContainTriple(p + x - 1)) || (x + 2 < n && mayContainTriple(p + x));
  }

 private:
  static constexpr size_t kMaxPackedLength = 7;

  struct PackedSlot {
    uint64_t key = 0;  // 0 = empty; a packed key is never 0 because its top byte holds the length (>= 1)
    Rank rank = kNoRank;
  };
  struct LongSlot {
    uint64_t hash = 0;
    uint32_t offset = 0;  // into arena_
    uint32_t length = 0;  // 0 = empty
    Rank rank = kNoRank;
  };

  static uint64_t pack(const uint8_t* bytes, size_t length) {
    uint64_t key = static_cast<uint64_t>(length) << 56;
    for (size_t i = 0; i < length; ++i) key |= static_cast<uint64_t>(bytes[i]) << (8 * i);
    return key;
  }
  static size_t packedIndex(uint64_t key, unsigned shift) {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift);
  }

  // The filter's bit for a key is the top kFilterBits bits of a 64-bit hash: for packed keys the key times an odd
  // constant other than packedIndex's (so that keys sharing a table slot rarely share a bit), for long keys their
  // XXH3 hash (whose low bits pick the slot).
  static constexpr unsigned kFilterBits = 21;  // 2 Mi bits = 256 KiB; ~100k tokens set about 5% of them
  static constexpr uint64_t kFilterMultiplier = 0xC2B2AE3D27D4EB4Full;
  bool mayContain(uint64_t hash) const {
    if (filter_.empty()) return false;  // not built
    const uint64_t bit = hash >> (64 - kFilterBits);
    return (filter_[bit >> 6] >> (bit & 63)) & 1;
  }
  void addToFilter(uint64_t hash) {
    const uint64_t bit = hash >> (64 - kFilterBits);
    filter_[bit >> 6] |= uint64_t{1} << (bit & 63);
  }

  // One bit per hash of the three-byte strings found inside tokens (about 27k in cl100k_base: ~5% of the bits),
  // 64 KiB so that it stays in cache beside the 8 KiB pair bitmaps.
  static constexpr unsigned kTripleFilterBits = 19;
  static uint64_t tripleHash(const uint8_t* p) {
    const uint64_t key = uint64_t{p[0]} | (uint64_t{p[1]} << 8) | (uint64_t{p[2]} << 16);
    return (key * kFilterMultiplier) >> (64 - kTripleFilterBits);
  }
  bool mayContainTriple(const uint8_t* p) const { return testBit(triple_filter_, tripleHash(p)); }
  static bool testBit(const std::vector<uint64_t>& bits, uint64_t bit) { return (bits[bit >> 6] >> (bit & 63)) & 1; }
  static void setBit(std::vector<uint64_t>& bits, uint64_t bit) { bits[bit >> 6] |= uint64_t{1} << (bit & 63); }

  Rank findPacked(uint64_t key) const;
  Rank findLong(const uint8_t* bytes, size_t length) const;
  bool insert(std::string_view bytes, Rank rank);

  std::vector<PackedSlot> packed_;
  unsigned packed_shift_ = 64;  // 64 - log2(packed_.size())
  std::vector<LongSlot> long_;
  std::string arena_;
  Rank byte_ranks_[256] = {};
  std::vector<Rank> pair_ranks_;  // 65536 entries (256 KB): small enough to stay in cache, unlike packed_
  std::vector<uint64_t> filter_;  // 2^kFilterBits bits: set for every token's hash
  // For mayJoinAcross: bit (a << 8 | b) is set when the bytes a, b occur side by side in some token
  // (pair_in_token_), or when they are a token (pair_is_token_); 8 KiB each.
  // Sized here, not only in build(), so that testBit needs no check for an unbuilt instance (all bits clear: every
  // boundary is cut, which matches find's kNoRank for every span).
  std::vector<uint64_t> pair_in_token_ = std::vector<uint64_t>((size_t{1} << 16) / 64);
  std::vector<uint64_t> pair_is_token_ = std::vector<uint64_t>((size_t{1} << 16) / 64);
  std::vector<uint64_t> triple_filter_ = std::vector<uint64_t>((size_t{1} << kTripleFilterBits) / 64);
  size_t size_ = 0;
};

// Appends the token ids of one piece (as 4-byte big-endian values) to out: one lookup when the whole piece is a
// token (most pieces are), else tiktoken's merge: repeatedly join the adjacent pair whose concatenation has the
// lowest rank, the leftmost on ties. The piece is cut where no token can cross (mayJoinAcross) and each span merged
// alone: spans of up to three bytes directly, short ones by a quadratic scan over a stack array, long ones (runs of
// white space or punctuation) by a heap, so the cost stays O(n log n). Uses thread-local scratch that grows to the
// longest piece seen, so steady-state calls allocate nothing beyond out's growth.
void bytePairEncode(const BpeRanks& ranks, std::string_view piece, std::vector<uint8_t>& out);

// Appends id as kTokenIdBytes bytes, big-endian: the byte form every token-id tokenizer hands to block hashing.
inline void appendTokenId(uint32_t id, std::vector<uint8_t>& out) {
  static_assert(kTokenIdBytes == sizeof(uint32_t), "a token id is packed as a big-endian uint32");
  const uint8_t bytes[kTokenIdBytes] = {static_cast<uint8_t>(id >> 24), static_cast<uint8_t>(id >> 16),
                                        static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id)};
  out.insert(out.end(), bytes, bytes + kTokenIdBytes);
}

}  // namespace prefixgate::tokenize
