#pragma once
// How many bytes of the index's encoding of a prompt (prompt.bytes: the character tokenizer's text, tiktoken's or
// the engine's ids at 4 bytes each) make one token of the ENGINE, learned per model from the engines' usage
// (usage.prompt_tokens, or llama.cpp's timings). Wherever the gateway turns engine tokens into blocks (a pod's KV
// capacity) or blocks into engine tokens (the prefill a request costs, the wait scorer's queues), it uses this
// instead of a constant: tried on llama.cpp with a SentencePiece vocabulary, prompts ran about 2.7 bytes per token,
// not the 4 assumed before, so every capacity was off by half.
//
// Decayed sums (bytes, tokens), so long prompts weigh more than short ones (whose chat template's tokens are a
// large part of them) and the ratio follows a change of traffic. Reads are lock-free (the decision path); adds
// take a small per-model mutex (once per response). Thread-safe.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>

#include "index/model_registry.h"
#include "tokenize/token_bytes.h"

namespace prefixgate::routing {

class BytesPerToken {
 public:
  // A sample outside this range (a prompt of a few bytes with a long template, a bogus usage) is ignored.
  static constexpr double kMinSample = 0.25;
  static constexpr double kMaxSample = 64;
  // Each response's share: the sums decay by this much per sample (about the last 50 responses count).
  static constexpr double kDecay = 0.98;

  BytesPerToken();
  ~BytesPerToken();

  // The model's learned ratio, tokenize::kDefaultBytesPerToken until one of its responses reported usage. Lock-free.
  double ratio(std::string_view model) const;
  // A response of `model` whose prompt was `encoded_bytes` bytes in the index's encoding and `engine_tokens`
  // tokens by the engine's count.
  void add(std::string_view model, uint64_t encoded_bytes, uint64_t engine_tokens);
  // Responses learned from for `model` (for /debug/pods and tests).
  uint64_t samples(std::string_view model) const;

  // Engine tokens in `encoded_bytes` of `model`'s prompts (rounded, at least 1 for a non-empty prompt).
  uint64_t engineTokens(std::string_view model, uint64_t encoded_bytes) const;

 private:
  struct Entry {
    std::mutex mutex;
    double bytes = 0;   // decayed sums, guarded by mutex
    double tokens = 0;
    std::atomic<double> ratio{tokenize::kDefaultBytesPerToken};
    std::atomic<uint64_t> samples{0};
  };
  index::ModelRegistry models_;
  std::unique_ptr<Entry[]> entries_;  // by model key
};

}  // namespace prefixgate::routing
