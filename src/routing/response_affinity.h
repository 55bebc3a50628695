#pragma once
// Chain affinity for the Responses API: which pod produced each response id. A request with
// `previous_response_id`, and every call naming an id (GET/DELETE /v1/responses/{id}, .../cancel), goes to that pod
// (the engine stores a response where it produced it). A pure, bounded map: at most max_entries ids (the least
// recently used go first), each forgotten ttl_ms after it was last produced or used; the clock is injected.
// Thread-safe (one mutex): every event loop shares one map.
// Shared between replicas by state sync (docs/state-sync.md, "Response ids"): what this replica remembers and
// forgets goes out through a ResponseSink, and what the others remembered and forgot comes back through
// applyRemote/forgetRemote, which never reach the sink (no echo between replicas).
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace prefixgate::routing {

// Told of each id this replica's map remembered or forgot (state sync shares them). Called on request threads,
// outside the map's lock; must not block.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // `pod` (by name) produced response `id` (a valid id, just remembered).
  virtual void responseRemembered(std::string_view id, std::string_view pod) = 0;
  // Response `id`, which `pod` produced, was deleted there.
  virtual void responseForgotten(std::string_view id, std::string_view pod) = 0;
};

class ResponseAffinity {
 public:
  using NowMs = std::function<int64_t()>;
  // routing.response_affinity.max_entries and ttl_ms; max_entries 0 keeps nothing (affinity off).
  ResponseAffinity(size_t max_entries, int64_t ttl_ms, NowMs now_ms);

  // Remembers that `pod` produced response `id` (an id that is not openai::validResponseId is ignored), and tells
  // the sink.
  void remember(std::string_view id, std::string_view pod);
  // The pod that produced `id`, when remembered and not expired (the entry is refreshed); empty otherwise.
  std::optional<std::string> podOf(std::string_view id);
  // Forgets `id` (its response was deleted), and tells the sink when it was remembered.
  void forget(std::string_view id);
  // Another replica's remember, `age_ms` old (its expiry runs from then): applied like remember() but for the
  // sink; an entry already expired is ignored (returns false). An id remembered here keeps the later expiry.
  bool applyRemote(std::string_view id, std::string_view pod, int64_t age_ms);
  // Another replica's forget: like forget() but for the sink.
  void forgetRemote(std::string_view id);
  // Set once, before any request (not thread-safe against the calls above); null: nothing is shared.
  void setSink(ResponseSink* sink) { sink_ = sink; }
  size_t size() const;
  size_t maxEntries() const { return max_entries_; }
  int64_t ttlMs() const { return ttl_ms_; }

  // prefixgate_response_affinity_total{outcome}: a request naming a response id went to its pod ("hit"), its pod
  // was no candidate ("pod_gone"), or the id was not remembered ("unknown").
  enum class Outcome { kHit, kPodGone, kUnknown };
  void count(Outcome outcome);
  uint64_t counted(Outcome outcome) const;

 private:
  struct Entry {
    std::string pod;
    int64_t expires_ms = 0;
    std::list<std::string>::iterator lru;  // its place in lru_ (front: most recently used)
  };
  void eraseLocked(std::unordered_map<std::string, Entry>::iterator it);
  // Inserts or updates `id` at the front of the LRU order; `keep_later` keeps an existing entry's later expiry.
  void putLocked(std::string_view id, std::string_view pod, int64_t expires_ms, bool keep_later);
  // Erases `id`; returns its pod when it was there.
  std::optional<std::string> eraseId(std::string_view id);

  const size_t max_entries_;
  const int64_t ttl_ms_;
  NowMs now_ms_;
  ResponseSink* sink_ = nullptr;
  mutable std::mutex mutex_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, Entry> entries_;
  uint64_t outcomes_[3] = {};
};

}  // namespace prefixgate::routing
