#pragma once
// OpenAI's cl100k_base encoding, token for token identical to tiktoken's encode_ordinary: cl100k's pre-tokenizer
// (Cl100kSplitter) followed by byte-pair merging with the vocabulary of the npm `tiktoken` package's
// encoders/cl100k_base.json (fetched by scripts/fetch_tiktoken.sh).
//
// Special tokens such as <|endoftext|> are encoded as the ordinary text they are spelled with, never as their
// special ids: prompts are user text, and a user typing "<|endoftext|>" must not be able to change how the
// prompt hashes relative to what it says (this is also what tiktoken's encode_ordinary does).
#include <memory>
#include <string>
#include <string_view>

#include "tokenize/bpe_ranks.h"
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

 private:
  TiktokenTokenizer() = default;

  BpeRanks ranks_;
};

}  // namespace prefixgate::tokenize
