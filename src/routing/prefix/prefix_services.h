#pragma once
// What prefix strategies share: the configured tokenizer, the hash seed and block size, and the prefix index.
// Built once at start (config errors become start-up errors) and handed to strategies through StrategyDeps.
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "index/prefix_index.h"
#include "openai/request.h"
#include "prefixgate/types.h"
#include "tokenize/tokenizer.h"

namespace prefixgate::routing {

// A request's prompt, tokenized and cut into chained block hashes.
struct PromptBlocks {
  size_t tokens = 0;
  std::vector<BlockHash> hashes;  // full blocks only
};

class PrefixServices {
 public:
  // Returns null and sets `error` (naming the config key) when the tokenizer cannot be built.
  static std::unique_ptr<PrefixServices> create(const config::Config& config, std::string& error);
  // A given tokenizer, no file access. `clock` (for tests) must outlive this; null = the steady clock.
  PrefixServices(std::unique_ptr<tokenize::Tokenizer> tokenizer, uint32_t block_size, uint64_t seed,
                 const index::PrefixIndexOptions& options, const Clock* clock = nullptr);

  // Tokenizes the request's prompt (or packs its token ids) and hashes its full blocks into `out`.
  // Thread-safe; reuses `out`'s and a per-thread buffer's capacity.
  void hashPrompt(const openai::RequestView& request, PromptBlocks& out) const;

  index::PrefixIndex& index() { return *index_; }
  const tokenize::Tokenizer& tokenizer() const { return *tokenizer_; }
  uint32_t blockSize() const { return block_size_; }
  uint64_t seed() const { return seed_; }

 private:
  SystemClock system_clock_;
  std::unique_ptr<tokenize::Tokenizer> tokenizer_;
  uint32_t block_size_;
  uint64_t seed_;
  std::unique_ptr<index::PrefixIndex> index_;
};

// Where the cl100k_base vocabulary is looked for when routing.prefix_cache.tiktoken_file is empty.
std::vector<std::string> defaultTiktokenFiles();

}  // namespace prefixgate::routing
