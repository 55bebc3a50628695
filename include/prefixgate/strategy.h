#pragma once
// The seam every routing strategy plugs into. The Router owns filtering (ready pods serving the model) and
// picking (highest score; ties to fewer in-flight requests, then at random); a strategy only scores.
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "prefixgate/types.h"

namespace prefixgate::discovery {
class PodState;
}
namespace prefixgate::openai {
struct RequestView;
}

namespace prefixgate::routing {

// What a scorer's explanations are called (static: one per scorer): their name, shown by /debug/route, and the names
// of their numbers (string literals).
struct ExplanationKeys {
  std::string_view name;
  std::array<std::string_view, 6> keys;
  size_t size = 0;
};

// A scorer's explanation of one candidate's score, shown by /debug/route under keys->name: up to kMax numbers named by
// the scorer's static ExplanationKeys (e.g. "wait": total_ms, base_ms, ...). Small and fixed (a pointer and six
// doubles), so candidates stay cheap to fill and copy with many pods.
struct Explanation {
  static constexpr size_t kMax = 6;
  const ExplanationKeys* keys = nullptr;  // null = none
  std::array<double, kMax> values{};
  // The value named `key`; NaN when absent.
  double get(std::string_view key) const {
    if (keys)
      for (size_t i = 0; i < keys->size && i < kMax; ++i)
        if (keys->keys[i] == key) return values[i];
    return NAN;
  }
};

// One candidate pod: what a strategy may read (numbers the Router read once when the decision starts, and the pod
// itself read-only: its name, spec, latency estimate, KV sync state) and what it fills in (score, match_percent,
// load_score). Strategies never change a pod; what a decision changes (the in-flight count) the Router does.
struct Candidate {
  const discovery::PodState* pod = nullptr;
  PodId pod_id;
  int32_t in_flight = 0;       // in-flight requests (this gateway's, plus the other replicas' with state sync), read once when the decision starts
  // Prompt tokens of the requests in flight to the pod (their context, which it is prefilling or decoding):
  // this gateway's exact sum, plus with state sync the other replicas' requests at this gateway's mean per request.
  double in_flight_tokens = 0;
  // This gateway's requests sent to the pod still waiting for their first byte, and the prompt tokens they were
  // predicted to miss (the prefill work queued ahead of a new request), read once when the decision starts.
  int32_t prefill_requests = 0;
  double prefill_tokens = 0;
  double score = 0;            // filled by the strategy: higher wins
  int match_percent = -1;      // filled by prefix strategies (explanations, headers); -1 = not computed
  double load_score = NAN;     // filled by load-aware strategies (explanations); NaN = not computed
  // Engine load, read by the Router when the decision starts (engine metrics older than the staleness limit
  // count as unknown, so a pod whose /metrics stopped answering is scored as neutral, not as idle or full).
  double waiting = 0;          // vllm:num_requests_waiting; 0 when unknown
  double kv_usage = NAN;       // KV cache usage 0..1; NaN = unknown
  double capacity = 0;         // measured output tokens/s; 0 = not measured (scored as the mean of the others)
  bool excluded = false;       // set by the Router on pods it filtered out (listed by /debug/route, never scored)
  // (A scorer's explanation of the score is in RoutingInput::explanations: kept out of here, the candidate stays
  // small enough to be filled without a memset, ~5 us of a 1,000-pod decision.)
};

// Per-request settings resolved from the model's config profile.
struct RequestSettings {
  double standard_deviation_factor = 0;
  LoadBalanceSettings load_balance;  // routing.load_balance with the model's and profile's overrides
};

// Something routing holds for one request until its engine has started answering (the first response body
// bytes, a stream's first token), or until the request ends without that: destroying it releases it.
class PendingRequest {
 public:
  virtual ~PendingRequest() = default;
};

// A request's prompt blocks and each candidate's predicted share of them (routing/prefix/prefix_services.h).
struct PromptMatch;

struct RoutingInput {
  const openai::RequestView& request;
  std::span<Candidate> candidates;  // never empty
  RequestSettings settings;
  std::mt19937_64& rng;             // per-thread generator (seeded in tests)
  bool dry_run = false;             // /debug/route: decide, but record nothing
  // The Router's clock (steady milliseconds) when the decision started: the one time base strategies read.
  int64_t now_ms = 0;
  // For a strategy that wantsPromptMatch(): the prompt's blocks and, per candidate, the blocks its pod is predicted
  // to hold, made by the Router before score(). Null for other strategies (and without prefix services).
  const PromptMatch* match = nullptr;
  // A label for aibrix_prefix_cache_routing_selection_total-style outcomes; "" when the strategy has none.
  std::string_view outcome;
  // Facts about the request a strategy computed (e.g. "tokens", "blocks"), shown by /debug/route.
  std::vector<std::pair<std::string, int64_t>> details;
  // One per candidate (the candidates' order) when the decision is explained (/debug/route's dry run), for the
  // scorer's explanation of each score; empty otherwise (scorers then skip them: a 1,000-pod decision must not fill
  // and zero 1,000 explanations nobody reads).
  std::span<Explanation> explanations;
};

// What a request's engine did with it, told to the strategy that chose the pod (RoutingFeedback below).
struct Completion;

// A strategy's name is written once, as its class's kName: the registry names the instance with it (and the Router
// reports the name it resolved), so the class has no name() to keep in step.
class Strategy {
 public:
  virtual ~Strategy() = default;
  // Whether score() reads the prompt's match (RoutingInput::match): then the Router hashes and matches the prompt
  // before score() and, after the pick, records it for the chosen pod (the prefix index, the KV event hold, the
  // prediction and the prefix metrics); with the remote tokenizer on, the session first fetches the engine's token
  // ids (RequestView::remote_token_ids).
  virtual bool wantsPromptMatch() const { return false; }
  // Whether score() may see a sample of the pods at large fleets (routing.max_scored_pods: the pods holding a
  // prefix match plus a few drawn at random) instead of every one. False for a strategy that must see a pod it
  // chose before wherever it is (session-affinity's pinned pod).
  virtual bool scoresSample() const { return true; }
  // Fills candidates[i].score (and optionally match_percent / load_score). Called on event-loop threads,
  // concurrently: implementations are thread-safe and do not block.
  virtual void score(RoutingInput& input) = 0;
  // After the Router picked candidates[chosen]; unless input.dry_run, a strategy may record the choice.
  virtual void onPicked(RoutingInput& input, size_t chosen) {}
  // The feedback of a decision it made (routing::Ticket calls them, on the request's thread; no-ops by default,
  // for strategies that learn): the engine began answering; an attempt on the pod failed before the engine
  // computed the prompt; the response ended.
  virtual void onFirstByte(const discovery::PodState& pod) {}
  virtual void onAttemptFailed(const discovery::PodState& pod) {}
  virtual void onCompleted(const discovery::PodState& pod, const Completion& completion) {}
};

}  // namespace prefixgate::routing
