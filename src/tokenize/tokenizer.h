#pragma once
// Tokenizers turn prompt text into the byte buffer that block hashing cuts into blocks. Two prompts share a
// block hash only if their buffers share that block's bytes (and everything before it), so a tokenizer's output
// must depend on nothing but the text: same text, same bytes, on every replica and every run.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "tokenize/token_bytes.h"

namespace prefixgate::tokenize {

class Tokenizer {
 public:
  virtual ~Tokenizer();

  // The name configuration selects it by ("character", "tiktoken"); stable for the life of the object.
  virtual std::string_view name() const = 0;

  // Appends the encoded form of text to out (never clears it). Thread-safe: a tokenizer is immutable once built
  // and may be shared by all request threads. Allocates nothing beyond out's growth (tokenizers may keep
  // thread-local scratch that grows to the largest input seen). Any byte string is accepted, including invalid
  // UTF-8, so nothing can fail: the only exception is std::bad_alloc from that growth.
  virtual void encode(std::string_view text, std::vector<uint8_t>& out) const = 0;

  // The number of tokens in a buffer this tokenizer produced (prompt length in tokens, for metrics and limits).
  virtual size_t tokenCount(std::span<const uint8_t> encoded) const = 0;

  // The encoded form of `text` for hashing: by default encode() into `scratch` (cleared first) and a view of it.
  // A tokenizer whose encoding is the text itself returns a view of `text` and copies nothing. The view lives
  // as long as both `text` and `scratch`.
  virtual std::span<const uint8_t> encodeView(std::string_view text, std::vector<uint8_t>& scratch) const {
    scratch.clear();
    encode(text, scratch);
    return scratch;
  }

  // A tokenizer that caches the encodings of prompt segments counts its hits and misses (for /metrics); others
  // have no cache and answer nullopt.
  struct CacheStats {
    uint64_t hits = 0;    // segments whose encoding came from the cache
    uint64_t misses = 0;  // segments encoded (and then cached)
  };
  virtual std::optional<CacheStats> cacheStats() const { return std::nullopt; }
};

// The UTF-8 bytes of the text as they are; one byte is one token. Needs no data and cannot fail to load.
class CharacterTokenizer final : public Tokenizer {
 public:
  std::string_view name() const override { return "character"; }
  void encode(std::string_view text, std::vector<uint8_t>& out) const override;
  size_t tokenCount(std::span<const uint8_t> encoded) const override { return encoded.size(); }
  // The bytes are the encoding: no copy of the prompt on the request path.
  std::span<const uint8_t> encodeView(std::string_view text, std::vector<uint8_t>&) const override {
    return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
  }
};

// Appends each id as kTokenIdBytes bytes, big-endian uint32 (AIBrix's packing), for prompts that arrive as token
// ids and for ids returned by an engine's /tokenize. Thread-safe; allocates nothing beyond out's growth.
void packTokenIds(std::span<const uint32_t> ids, std::vector<uint8_t>& out);

}  // namespace prefixgate::tokenize
