#pragma once
// Shared by the tiktoken tests: the one cl100k_base tokenizer (loading takes a moment, so it is loaded once per
// test binary) and helpers that turn encoded buffers back into ids for readable failures.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tokenize/tiktoken_tokenizer.h"

namespace prefixgate::tokenize::testing {

// PREFIXGATE_TIKTOKEN_FILE, else the copy scripts/fetch_tiktoken.sh installs under the source tree.
inline std::string cl100kPath() {
  if (const char* env = std::getenv("PREFIXGATE_TIKTOKEN_FILE"); env != nullptr && *env != '\0') return env;
  return std::string(PREFIXGATE_SOURCE_DIR) + "/tools/tiktoken/node_modules/tiktoken/encoders/cl100k_base.json";
}

// The shared tokenizer, or null with the load error in error (tests GTEST_SKIP with it).
inline const TiktokenTokenizer* sharedCl100k(std::string& error) {
  static const TiktokenTokenizer::LoadResult loaded = TiktokenTokenizer::load(cl100kPath());
  error = loaded.error +
          "\n(run scripts/fetch_tiktoken.sh, or set PREFIXGATE_TIKTOKEN_FILE to a cl100k_base.json)";
  return loaded.tokenizer.get();
}

inline std::vector<uint32_t> unpackIds(const std::vector<uint8_t>& bytes) {
  std::vector<uint32_t> ids;
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    ids.push_back((uint32_t{bytes[i]} << 24) | (uint32_t{bytes[i + 1]} << 16) | (uint32_t{bytes[i + 2]} << 8) |
                  uint32_t{bytes[i + 3]});
  }
  return ids;
}

inline std::vector<uint32_t> encodeIds(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<uint8_t> out;
  tokenizer.encode(text, out);
  return unpackIds(out);
}

// Counts the positions where two id sequences differ (a length difference counts as the missing positions), and
// sets first to the first such index.
inline size_t countDifferences(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want, size_t& first) {
  size_t diffs = 0;
  first = SIZE_MAX;
  const size_t common = std::min(got.size(), want.size());
  for (size_t i = 0; i < common; ++i) {
    if (got[i] != want[i]) {
      if (first == SIZE_MAX) first = i;
      ++diffs;
    }
  }
  if (got.size() != want.size()) {
    if (first == SIZE_MAX) first = common;
    diffs += std::max(got.size(), want.size()) - common;
  }
  return diffs;
}

}  // namespace prefixgate::tokenize::testing
