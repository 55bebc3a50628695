#pragma once
// OpenAI's cl100k_base encoding, token for token identical to tiktoken's encode_ordinary: cl100k's pre-tokenizer
// (Cl100kSplitter) followed by byte-pair merging with the vocabulary of the npm `tiktoken` package's
// encoders/cl100k_base.json (fetched by scripts/fetch_tiktoken.sh).
//
// Special tokens such as <|endoftext|> are encoded as the ordinary text they are spelled with, never as their
// special ids: prompts are user text, and a user typing "<|endoftext|>" must not be able to change how the
// prompt hashes relative to what it says (this is also what tiktoken's encode_ordinary does).
#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "tokenize/bpe_ranks.h"
#include "tokenize/token_cache.h"
#include "tokenize/tokenizer.h"

namespace prefixgate::tokenize {

class TiktokenTokenizer final : public Tokenizer {
 public:
  struct LoadResult {
    std::unique_ptr<TiktokenTokenizer> tokenizer;  // null on failure
    std::string error;                             // on failure: names the file and what is wrong with it
  };

  // Reads a tiktoken encoder JSON file ({"pat_str", "special_tokens", "bpe_ranks"}). Meant for start-up: it
  // takes a few tens of milliseconds and allocates the vocabulary (about 5 MB).
  static LoadResult load(const std::string& path);
  // The same from the file's text already in memory; source names it in error messages.
  static LoadResult parse(std::string_view json_text, std::string_view source);

  std::string_view name() const override { return "tiktoken"; }
  // Appends each token id as 4 bytes, big-endian.
  void encode(std::string_view text, std::vector<uint8_t>& out) const override;
  size_t tokenCount(std::span<const uint8_t> encoded) const override { return encoded.size() / kTokenIdBytes; }

  size_t vocabularySize() const { return ranks_.size(); }

  // Texts longer than one segment are then cut into segments of at least kSegmentBytes at safe points
  // (nextSafeCut), and each segment's tokens are kept in an LRU bounded to the bytes of max_tokens token ids in all
  // (each entry's bookkeeping counted too: TokenCache::entryBytes), keyed by a hash of the segment chained with
  // every segment before it: the prefix a conversation resends is looked up, and only the text after its last cut
  // is encoded again. The output is the same with or without it. The hash is
  // seeded at random per process, so nobody can craft texts whose keys collide. 0 turns it off. Call once, before
  // the tokenizer is shared.
  void enableSegmentCache(size_t max_tokens);
  static constexpr size_t kSegmentBytes = 4096;

  // The segment cache's counts; nullopt while it is off.
  std::optional<CacheStats> cacheStats() const override {
    if (!segments_) return std::nullopt;
    return CacheStats{segment_hits_.load(std::memory_order_relaxed), segment_misses_.load(std::memory_order_relaxed)};
  }

 private:
  TiktokenTokenizer() = default;

  void encodeText(std::string_view text, std::vector<uint8_t>& out) const;
  void encodeSegments(std::string_view text, std::vector<uint8_t>& out) const;

  BpeRanks ranks_;
  std::unique_ptr<TokenCache> segments_;  // null when off
  uint64_t segment_seed_ = 0;
  mutable std::atomic<uint64_t> segment_hits_{0};
  mutable std::atomic<uint64_t> segment_misses_{0};
};

}  // namespace prefixgate::tokenize
