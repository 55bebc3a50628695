#pragma once
// Token lists kept by a 64-bit key: the remote tokenizer's answers (keyed by tokenizeCacheKey) and the tiktoken
// tokenizer's text segments (TiktokenTokenizer::enableSegmentCache). A least-recently-used cache bounded by entries
// and by bytes in all (each entry's token ids plus kEntryOverheadBytes), shared by every event-loop thread. Sharded,
// one mutex per shard, so threads that look up different prompts rarely meet; a hit is a hash lookup, a list splice
// and a reference-count increment.
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace prefixgate::tokenize {

class TokenCache {
 public:
  using Tokens = std::shared_ptr<const std::vector<uint32_t>>;
  static constexpr size_t kDefaultShards = 16;
  // What an entry costs besides its token ids: the key, its list node and map node, the shared vector's control
  // block and header, and the allocator's headers (measured on libstdc++ 12: about 150 bytes, rounded up).
  static constexpr size_t kEntryOverheadBytes = 160;
  // The bytes an entry of `tokens` ids is counted as.
  static constexpr size_t entryBytes(size_t tokens) { return kEntryOverheadBytes + tokens * sizeof(uint32_t); }

  // `max_entries` > 0 bounds the whole cache, and `max_bytes` the bytes of all its entries (entryBytes). The shard
  // count is clamped to [1, max_entries]; the shards' bounds add up to the two bounds, and least-recently-used order
  // holds within a shard (exactly, with one shard).
  explicit TokenCache(size_t max_entries, size_t shards = kDefaultShards, size_t max_bytes = SIZE_MAX);

  // The tokens cached under `key`, now the most recently used of its shard; null when absent. Thread-safe.
  Tokens find(uint64_t key);
  // Caches `tokens` under `key` (replacing what was there), dropping the shard's least recently used entries
  // while it is over either bound; an entry larger than a shard's byte bound is not kept. Thread-safe.
  void insert(uint64_t key, Tokens tokens);

  size_t size() const;
  // The bytes of all entries, as the byte bound counts them (entryBytes). Thread-safe.
  size_t bytes() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Shard {
    std::mutex mutex;
    size_t capacity = 0;
    size_t byte_capacity = 0;
    size_t bytes = 0;  // of all entries
    std::list<std::pair<uint64_t, Tokens>> lru;  // most recently used first
    std::unordered_map<uint64_t, std::list<std::pair<uint64_t, Tokens>>::iterator> entries;
  };
  Shard& shardOf(uint64_t key) { return *shards_[(key >> 40) % shards_.size()]; }
  static size_t bytesOf(const Tokens& tokens) { return entryBytes(tokens ? tokens->size() : 0); }

  size_t capacity_;
  std::vector<std::unique_ptr<Shard>> shards_;
};

}  // namespace prefixgate::tokenize
