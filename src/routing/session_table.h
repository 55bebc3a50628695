#pragma once
// The session-affinity table: which pod each conversation (`x-session-id`) is pinned to. Owned by the gateway and
// shared by the session-affinity strategy (its settings, routing.strategies.session-affinity.*) and state sync,
// which tells the other replicas of this gateway's pins through a SessionSink and applies theirs
// (docs/state-sync.md). Pure: the caller passes the time (steady milliseconds), so TTL and LRU are unit-tested
// without sleeps.
#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "config/config.h"
#include "prefixgate/types.h"

namespace prefixgate::config {
class YamlReader;
}
namespace prefixgate::discovery {
class PodState;
}

namespace prefixgate::routing {

// Told of each pin this gateway made or kept (state sync shares them with the other replicas). Called on request
// threads: implementations are thread-safe and never block.
class SessionSink {
 public:
  virtual ~SessionSink() = default;
  // `id` was routed to `pod`, which it was pinned to `pinned_ago_ms` ago (0: a new pin or a move).
  virtual void sessionPinned(std::string_view id, const discovery::PodState& pod, int64_t pinned_ago_ms) = 0;
};

class SessionTable {
 public:
  // The strategy whose settings (routing.strategies.<name>.*) size the table.
  static constexpr std::string_view kStrategyName = "session-affinity";
  // Longer ids are not pinned (nor accepted from another replica).
  static constexpr size_t kMaxIdBytes = 256;
  struct Settings {
    uint32_t ttl_ms = 600000;
    uint32_t max_sessions = 100000;
    void read(config::YamlReader& r);
    // routing.strategies.session-affinity of `config` (checked at start by the strategy registry: a bad key
    // leaves its default here).
    static Settings fromConfig(const config::Config& config);
  };
  // A pin made by another replica, its times converted to this table's clock.
  struct RemotePin {
    PodId pod;
    int64_t used_ms = 0;    // when that replica last routed the session to the pod: the TTL runs from here
    int64_t pinned_ms = 0;  // when the session was pinned to the pod (<= used_ms): of two pins, the newer wins
  };

  explicit SessionTable(const Settings& settings) : settings_(settings) {}
  SessionTable(const SessionTable&) = delete;
  SessionTable& operator=(const SessionTable&) = delete;
  const Settings& settings() const { return settings_; }

  // The pod `id` is pinned to, unless it went unused for ttl_ms (then it is forgotten). Thread-safe.
  std::optional<PodId> lookup(std::string_view id, int64_t now_ms);
  // This gateway routed `id` to `pod_id`: pins it there (a new pin, a move, or a use that keeps the pin alive for
  // another ttl_ms), beyond max_sessions forgetting the least recently used session. Tells the sink of a new pin
  // or a move, and of an unchanged pin once per ttl_ms / 4 (kRefreshDivisor) so the other replicas' copies do not
  // expire while this one keeps the session busy. `pod` names the pod to the sink (null: nothing is told). The
  // sink is called outside the table's lock. Thread-safe.
  void remember(std::string_view id, PodId pod_id, const discovery::PodState* pod, int64_t now_ms);
  // Applies another replica's pin without telling the sink: a pin to the same pod extends its TTL; one to another
  // pod replaces this table's only if it is newer (so replicas that moved a session at the same time agree on the
  // later move); an expired one is ignored. Returns whether the table changed. Thread-safe.
  bool applyRemote(std::string_view id, const RemotePin& pin, int64_t now_ms);
  // Where pins go besides the table; null = nowhere. Set before serving.
  void setSink(SessionSink* sink) { sink_ = sink; }
  size_t size() const;

  static constexpr int64_t kRefreshDivisor = 4;

 private:
  struct Entry {
    PodId pod;
    int64_t expires_ms;
    int64_t pinned_ms;  // when the session was pinned to `pod` (here or by another replica)
    int64_t shared_ms;  // when the pin was last told to the sink or received from another replica
    std::list<std::string>::iterator lru;  // position in lru_ (front = most recent)
  };
  // Inserts `id` as the most recent entry, forgetting the least recently used ones beyond max_sessions.
  Entry& insert(std::string_view id, const Entry& entry);

  const Settings settings_;
  SessionSink* sink_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> table_;
  std::list<std::string> lru_;
};

}  // namespace prefixgate::routing
