// session-affinity: the requests of one conversation (the `x-session-id` header) go to the pod that served it
// before, while that pod is a candidate: ready, under limits.max_in_flight_per_pod, not KV-critical and not cut by
// the load-imbalance gate (the Router filters before any strategy). Otherwise, and for a new session, the pod with
// the fewest in flight, which the session then sticks to. Requests without the header: fewest in flight.
// Bounded: a session not seen for ttl_ms is forgotten, and beyond max_sessions the least recently used one is;
// ids longer than kMaxIdBytes are not pinned (least-request). The table is this gateway's own (with state sync
// each replica keeps its own: a session moving between replicas is re-pinned by the first that sees it).
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "config/yaml_reader.h"
#include "openai/request.h"
#include "routing/router.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class SessionAffinityStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = "session-affinity";
  static constexpr size_t kMaxIdBytes = 256;
  struct Settings {
    uint32_t ttl_ms = 600000;
    uint32_t max_sessions = 100000;
    void read(config::YamlReader& r) {
      r.read("ttl_ms", ttl_ms);
      r.read("max_sessions", max_sessions);
      if (ttl_ms == 0) r.problem("ttl_ms", "must be greater than 0");
      if (max_sessions == 0) r.problem("max_sessions", "must be greater than 0");
      if (max_sessions > 10'000'000) r.problem("max_sessions", "must be at most 10000000");
    }
  };
  SessionAffinityStrategy(const StrategyDeps&, const Settings& settings) : settings_(settings) {}
  std::string_view name() const override { return kName; }

  void score(RoutingInput& input) override {
    for (Candidate& c : input.candidates) c.score = -static_cast<double>(c.in_flight);
    const std::string_view id = input.request.session_id;
    if (id.empty() || id.size() > kMaxIdBytes) {
      input.outcome = "no_session";
      return;
    }
    const std::optional<PodId> pinned = lookup(id, steadyNowMs());
    input.outcome = pinned ? "moved" : "new";
    if (!pinned) return;
    for (Candidate& c : input.candidates)
      if (c.pod_id == *pinned) {
        c.score = 1;  // above every other candidate's (<= 0)
        input.outcome = "pinned";
      }
  }

  void onPicked(RoutingInput& input, size_t chosen) override {
    const std::string_view id = input.request.session_id;
    if (input.dry_run || id.empty() || id.size() > kMaxIdBytes) return;
    remember(id, input.candidates[chosen].pod_id, steadyNowMs());
  }

 private:
  struct Entry {
    PodId pod;
    int64_t expires_ms;
    std::list<std::string>::iterator lru;  // position in lru_ (front = most recent)
  };
  std::optional<PodId> lookup(std::string_view id, int64_t now) {
    std::lock_guard lock(mutex_);
    auto it = table_.find(std::string(id));
    if (it == table_.end()) return std::nullopt;
    if (it->second.expires_ms <= now) {
      lru_.erase(it->second.lru);
      table_.erase(it);
      return std::nullopt;
    }
    return it->second.pod;
  }
  void remember(std::string_view id, PodId pod, int64_t now) {
    std::lock_guard lock(mutex_);
    const int64_t expires = now + settings_.ttl_ms;
    auto it = table_.find(std::string(id));
    if (it != table_.end()) {
      it->second.pod = pod;
      it->second.expires_ms = expires;
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return;
    }
    while (table_.size() >= settings_.max_sessions && !lru_.empty()) {
      table_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.emplace_front(id);
    table_.emplace(lru_.front(), Entry{pod, expires, lru_.begin()});
  }

  Settings settings_;
  std::mutex mutex_;
  std::unordered_map<std::string, Entry> table_;
  std::list<std::string> lru_;
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(session_affinity, SessionAffinityStrategy)
