#include "routing/prefix/prefix_services.h"

#include <filesystem>

#include "config/random_seed.h"
#include "index/block_hash.h"
#include "tokenize/tiktoken_tokenizer.h"

namespace prefixgate::routing {

std::vector<std::string> defaultTiktokenFiles() {
  std::vector<std::string> out = {"/usr/share/prefixgate/cl100k_base.json"};
#ifdef PREFIXGATE_SOURCE_DIR
  out.push_back(std::string(PREFIXGATE_SOURCE_DIR) + "/tools/tiktoken/node_modules/tiktoken/encoders/cl100k_base.json");
#endif
  return out;
}

std::unique_ptr<PrefixServices> PrefixServices::create(const config::Config& config, std::string& error) {
  const auto& pc = config.routing.prefix_cache;
  std::unique_ptr<tokenize::Tokenizer> tokenizer;
  if (pc.tokenizer == "tiktoken") {
    std::string path = pc.tiktoken_file;
    if (path.empty()) {
      for (const std::string& candidate : defaultTiktokenFiles())
        if (std::filesystem::exists(candidate)) {
          path = candidate;
          break;
        }
    }
    if (path.empty()) {
      error = "routing.prefix_cache.tiktoken_file: no cl100k_base.json found (looked in /usr/share/prefixgate; "
              "run scripts/fetch_tiktoken.sh and set the key to the path it prints)";
      return nullptr;
    }
    auto loaded = tokenize::TiktokenTokenizer::load(path);
    if (!loaded.tokenizer) {
      error = "routing.prefix_cache.tiktoken_file: " + loaded.error;
      return nullptr;
    }
    tokenizer = std::move(loaded.tokenizer);
  } else {
    tokenizer = std::make_unique<tokenize::CharacterTokenizer>();
  }
  // The seed: configured; else 0 when replicas share the index through state sync; else derived from random_seed
  // (random per process when that is 0).
  const uint64_t seed = pc.hash_seed.value_or(
      config.state_sync.enabled ? 0 : config::streamSeed(config.random_seed, config::SeedPurpose::kHashSeed));
  index::PrefixIndexOptions options;
  options.block_capacity = pc.block_number;
  options.expiry = std::chrono::minutes(pc.eviction_duration_mins);
  return std::make_unique<PrefixServices>(std::move(tokenizer), pc.block_size, seed, options);
}

PrefixServices::PrefixServices(std::unique_ptr<tokenize::Tokenizer> tokenizer, uint32_t block_size, uint64_t seed,
                               const index::PrefixIndexOptions& options, const Clock* clock)
    : tokenizer_(std::move(tokenizer)),
      block_size_(block_size),
      seed_(seed),
      index_(std::make_unique<index::PrefixIndex>(options, clock ? *clock : system_clock_)) {}

void PrefixServices::hashPrompt(const openai::RequestView& request, PromptBlocks& out) const {
  thread_local std::vector<uint8_t> scratch;
  std::span<const uint8_t> bytes;
  if (request.has_token_ids) {
    scratch.clear();
    tokenize::packTokenIds(request.prompt_token_ids, scratch);
    bytes = scratch;
  } else {
    bytes = tokenizer_->encodeView(request.prompt_text, scratch);
  }
  out.tokens = request.has_token_ids ? request.prompt_token_ids.size() : tokenizer_->tokenCount(bytes);
  out.hashes.clear();
  index::hashBlocks(bytes, block_size_, seed_, out.hashes);
}

}  // namespace prefixgate::routing
