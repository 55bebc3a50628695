// session-affinity: the requests of one conversation (the `x-session-id` header) go to the pod that served it
// before, while that pod is a candidate: ready, under limits.max_in_flight_per_pod, not KV-critical and not cut by
// the load-imbalance gate (the Router filters before any strategy). Otherwise, and for a new session, the pod with
// the fewest in flight, which the session then sticks to. Requests without the header: fewest in flight.
// The pins live in a SessionTable (routing/session_table.h: a session not used for ttl_ms is forgotten, beyond
// max_sessions the least recently used one is; ids longer than kMaxIdBytes are not pinned). The gateway's table is
// shared by its replicas through state sync, so a session pinned or moved by one replica is followed by the others;
// without a table in StrategyDeps (tests) the strategy keeps its own.
#include <memory>
#include <optional>

#include "openai/request.h"
#include "routing/router.h"
#include "routing/session_table.h"
#include "routing/strategy_registry.h"

namespace prefixgate::routing {
namespace {

class SessionAffinityStrategy final : public Strategy {
 public:
  static constexpr std::string_view kName = SessionTable::kStrategyName;
  using Settings = SessionTable::Settings;
  SessionAffinityStrategy(const StrategyDeps& deps, const Settings& settings)
      : own_(deps.sessions ? nullptr : std::make_unique<SessionTable>(settings)),
        table_(deps.sessions ? *deps.sessions : *own_) {}

  // The pinned pod must be a candidate wherever it is in the fleet: never a sample.
  bool scoresSample() const override { return false; }

  void score(RoutingInput& input) override {
    for (Candidate& c : input.candidates) c.score = -static_cast<double>(c.in_flight);
    const std::string_view id = input.request.session_id;
    if (id.empty() || id.size() > SessionTable::kMaxIdBytes) {
      input.outcome = "no_session";
      return;
    }
    const std::optional<PodId> pinned = table_.lookup(id, input.now_ms);
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
    if (input.dry_run || id.empty() || id.size() > SessionTable::kMaxIdBytes) return;
    const Candidate& c = input.candidates[chosen];
    table_.remember(id, c.pod_id, c.pod, input.now_ms);
  }

 private:
  std::unique_ptr<SessionTable> own_;
  SessionTable& table_;
};

}  // namespace
}  // namespace prefixgate::routing

PREFIXGATE_STRATEGY(session_affinity, SessionAffinityStrategy)
