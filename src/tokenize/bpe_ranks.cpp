#include "tokenize/bpe_ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

// Header-only use keeps the hash inlined into the lookup loop.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace prefixgate::tokenize {
namespace {

// Both tables are kept at most half full so that probe chains stay short.
size_t tableSizeFor(size_t count) { return std::bit_ceil(std::max<size_t>(16, count * 2)); }

uint64_t longHash(const uint8_t* bytes, size_t length) { return XXH3_64bits(bytes, length); }

}  // namespace

bool BpeRanks::build(const std::vector<Entry>& entries, std::string& error) {
  size_t packed_count = 0;
  size_t long_bytes = 0;
  for (const Entry& e : entries) {
    if (e.bytes.size() <= kMaxPackedLength) {
      ++packed_count;
    } else {
      long_bytes += e.bytes.size();
    }
  }
  packed_.assign(tableSizeFor(packed_count), PackedSlot{});
  packed_shift_ = 64 - static_cast<unsigned>(std::countr_zero(packed_.size()));
  long_.assign(tableSizeFor(entries.size() - packed_count), LongSlot{});
  arena_.clear();
  arena_.reserve(long_bytes);
  std::fill(std::begin(byte_ranks_), std::end(byte_ranks_), kNoRank);
  pair_ranks_.assign(size_t{1} << 16, kNoRank);
  filter_.assign((size_t{1} << kFilterBits) / 64, 0);
  pair_in_token_.assign((size_t{1} << 16) / 64, 0);
  pair_is_token_.assign((size_t{1} << 16) / 64, 0);
  triple_filter_.assign((size_t{1} << kTripleFilterBits) / 64, 0);
  size_ = 0;

  for (const Entry& e : entries) {
    if (e.bytes.empty()) {
      error = fmt::format("the token with rank {} is empty", e.rank);
      return false;
    }
    if (e.rank == kNoRank) {
      error = fmt::format("rank {} is out of range", e.rank);
      return false;
    }
    if (e.bytes.size() > UINT32_MAX) {
      error = fmt::format("the token with rank {} is too long", e.rank);
      return false;
    }
    if (!insert(e.bytes, e.rank)) {
      error = fmt::format("the token with rank {} repeats the bytes of an earlier token", e.rank);
      return false;
    }
    if (e.bytes.size() == 1) byte_ranks_[static_cast<uint8_t>(e.bytes[0])] = e.rank;
    const auto* bytes = reinterpret_cast<const uint8_t*>(e.bytes.data());
    if (e.bytes.size() == 2) {
      pair_ranks_[(size_t{bytes[0]} << 8) | bytes[1]] = e.rank;
      setBit(pair_is_token_, (size_t{bytes[0]} << 8) | bytes[1]);
    }
    for (size_t i = 0; i + 1 < e.bytes.size(); ++i) setBit(pair_in_token_, (size_t{bytes[i]} << 8) | bytes[i + 1]);
    for (size_t i = 0; i + 2 < e.bytes.size(); ++i) setBit(triple_filter_, tripleHash(bytes + i));
  }
  for (int b = 0; b < 256; ++b) {
    if (byte_ranks_[b] == kNoRank) {
      error = fmt::format("no token for the single byte 0x{:02x}, so some texts could not be encoded", b);
      return false;
    }
  }
  return true;
}

bool BpeRanks::insert(std::string_view bytes, Rank rank) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() <= kMaxPackedLength) {
    const uint64_t key = pack(data, bytes.size());
    const size_t mask = packed_.size() - 1;
    for (size_t i = packedIndex(key, packed_shift_);; i = (i + 1) & mask) {
      PackedSlot& slot = packed_[i];
      if (slot.key == key) return false;
      if (slot.key == 0) {
        slot = {key, rank};
        addToFilter(key * kFilterMultiplier);
        ++size_;
        return true;
      }
    }
  }
  if (findLong(data, bytes.size()) != kNoRank) return false;
  const uint64_t hash = longHash(data, bytes.size());
  const size_t mask = long_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    LongSlot& slot = long_[i];
    if (slot.length == 0) {
      slot = {hash, static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(bytes.size()), rank};
      arena_.append(bytes);
      addToFilter(hash);
      ++size_;
      return true;
    }
  }
}

Rank BpeRanks::findPacked(uint64_t key) const {
  if (packed_.empty()) return kNoRank;  // not built
  const size_t mask = packed_.size() - 1;
  for (size_t i = packedIndex(key, packed_shift_);; i = (i + 1) & mask) {
    const PackedSlot& slot = packed_[i];
    if (slot.key == key) return slot.rank;
    if (slot.key == 0) return kNoRank;
  }
}

Rank BpeRanks::findLong(const uint8_t* bytes, size_t length) const {
  if (long_.empty()) return kNoRank;
  const uint64_t hash = longHash(bytes, length);
  if (!mayContain(hash)) return kNoRank;
  const size_t mask = long_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const LongSlot& slot = long_[i];
    if (slot.length == 0) return kNoRank;
    if (slot.hash == hash && slot.length == length && std::memcmp(arena_.data() + slot.offset, bytes, length) == 0) {
      return slot.rank;
    }
  }
}

}  // namespace prefixgate::tokenize
