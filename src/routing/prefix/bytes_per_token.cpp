#include "routing/prefix/bytes_per_token.h"

#include <cmath>

namespace prefixgate::routing {

BytesPerToken::BytesPerToken() : entries_(new Entry[index::ModelRegistry::kMaxModels]) {}
BytesPerToken::~BytesPerToken() = default;

double BytesPerToken::ratio(std::string_view model) const {
  const auto key = models_.find(model);
  return key ? entries_[*key].ratio.load(std::memory_order_relaxed) : tokenize::kDefaultBytesPerToken;
}

uint64_t BytesPerToken::samples(std::string_view model) const {
  const auto key = models_.find(model);
  return key ? entries_[*key].samples.load(std::memory_order_relaxed) : 0;
}

void BytesPerToken::add(std::string_view model, uint64_t encoded_bytes, uint64_t engine_tokens) {
  if (encoded_bytes == 0 || engine_tokens == 0) return;
  const double sample = static_cast<double>(encoded_bytes) / static_cast<double>(engine_tokens);
  if (!(sample >= kMinSample && sample <= kMaxSample)) return;
  const auto key = models_.findOrAdd(model);
  if (!key) return;  // more models than the registry holds: they keep the default
  Entry& e = entries_[*key];
  std::lock_guard lock(e.mutex);
  e.bytes = e.bytes * kDecay + static_cast<double>(encoded_bytes);
  e.tokens = e.tokens * kDecay + static_cast<double>(engine_tokens);
  e.ratio.store(e.bytes / e.tokens, std::memory_order_relaxed);
  e.samples.fetch_add(1, std::memory_order_relaxed);
}

uint64_t BytesPerToken::engineTokens(std::string_view model, uint64_t encoded_bytes) const {
  if (encoded_bytes == 0) return 0;
  const double tokens = std::round(static_cast<double>(encoded_bytes) / ratio(model));
  return tokens < 1 ? 1 : static_cast<uint64_t>(tokens);
}

}  // namespace prefixgate::routing
