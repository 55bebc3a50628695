#include "tokenize/token_cache.h"

#include <algorithm>

namespace prefixgate::tokenize {

TokenCache::TokenCache(size_t max_entries, size_t shards, size_t max_bytes)
    : capacity_(std::max<size_t>(1, max_entries)) {
  const size_t n = std::clamp<size_t>(shards, 1, capacity_);
  for (size_t i = 0; i < n; ++i) {
    auto shard = std::make_unique<Shard>();
    shard->capacity = capacity_ / n + (i < capacity_ % n ? 1 : 0);
    shard->byte_capacity = max_bytes == SIZE_MAX ? SIZE_MAX : max_bytes / n + (i < max_bytes % n ? 1 : 0);
    shard->entries.reserve(shard->capacity);
    shards_.push_back(std::move(shard));
  }
}

TokenCache::Tokens TokenCache::find(uint64_t key) {
  Shard& shard = shardOf(key);
  std::lock_guard lock(shard.mutex);
  auto it = shard.entries.find(key);
  if (it == shard.entries.end()) return nullptr;
  shard.lru.splice(shard.lru.begin(), shard.lru, it->second);
  return it->second->second;
}

void TokenCache::insert(uint64_t key, Tokens tokens) {
  Shard& shard = shardOf(key);
  const size_t size = bytesOf(tokens);
  if (size > shard.byte_capacity) return;
  // Released after the lock: freeing large token lists is not done while others wait.
  std::vector<Tokens> evicted;
  std::lock_guard lock(shard.mutex);
  if (auto it = shard.entries.find(key); it != shard.entries.end()) {
    shard.bytes -= bytesOf(it->second->second);
    evicted.push_back(std::move(it->second->second));
    shard.lru.erase(it->second);
    shard.entries.erase(it);
  }
  while (!shard.lru.empty() &&
         (shard.entries.size() >= shard.capacity || shard.bytes + size > shard.byte_capacity)) {
    auto& oldest = shard.lru.back();
    shard.bytes -= bytesOf(oldest.second);
    evicted.push_back(std::move(oldest.second));
    shard.entries.erase(oldest.first);
    shard.lru.pop_back();
  }
  shard.bytes += size;
  shard.lru.emplace_front(key, std::move(tokens));
  shard.entries.emplace(key, shard.lru.begin());
}

size_t TokenCache::size() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mutex);
    n += shard->entries.size();
  }
  return n;
}

size_t TokenCache::bytes() const {
  size_t n = 0;
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mutex);
    n += shard->bytes;
  }
  return n;
}

}  // namespace prefixgate::tokenize
