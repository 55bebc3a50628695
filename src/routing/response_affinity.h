#pragma once
// Chain affinity for the Responses API: which pod produced each response id. A request with
// `previous_response_id`, and every call naming an id (GET/DELETE /v1/responses/{id}, .../cancel), goes to that pod
// (the engine stores a response where it produced it). A pure, bounded map: at most max_entries ids (the least
// recently used go first), each forgotten ttl_ms after it was last produced or used; the clock is injected.
// Thread-safe (one mutex): every event loop shares one map. Not shared between replicas yet (state sync).
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace prefixgate::routing {

class ResponseAffinity {
 public:
  using NowMs = std::function<int64_t()>;
  // routing.response_affinity.max_entries and ttl_ms; max_entries 0 keeps nothing (affinity off).
  ResponseAffinity(size_t max_entries, int64_t ttl_ms, NowMs now_ms);

  // Remembers that `pod` produced response `id` (an id that is not openai::validResponseId is ignored).
  void remember(std::string_view id, std::string_view pod);
  // The pod that produced `id`, when remembered and not expired (the entry is refreshed); empty otherwise.
  std::optional<std::string> podOf(std::string_view id);
  // Forgets `id` (its response was deleted).
  void forget(std::string_view id);
  size_t size() const;

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

  const size_t max_entries_;
  const int64_t ttl_ms_;
  NowMs now_ms_;
  mutable std::mutex mutex_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, Entry> entries_;
  uint64_t outcomes_[3] = {};
};

}  // namespace prefixgate::routing
