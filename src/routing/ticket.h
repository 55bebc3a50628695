#pragma once
// The feedback path of one routing decision. The Router hands it out with the Decision; the proxy calls its three
// events as the request runs, and routing owns what each does:
// - firstByte(): the engine began answering (a stream's first token: it computed the prompt): the KV event hold and
//   the pod's prefill count for the request are released.
// - attemptFailed(kind): the attempt on the pod failed; when the engine never computed the prompt, the blocks this
//   decision recorded for the pod beyond what it was predicted to hold already are withdrawn from the index (the
//   pod does not hold them) and its slot hold ends.
// - completed(completion): the response ended: the pod's latency, service rates and capacity are trained, the
//   model's bytes per engine token learned, a slot engine's cache evidence noted, the prediction audited (into the
//   pod's totals; the audit is returned for the metrics and the log), KV event sync told the pod completed one.
// The strategy hears each through its hooks (Strategy::onFirstByte, ...). A failed-over request gets a new
// Decision and a new Ticket for the next pod: the first pod's ticket never trains the second pod.
// Destroying the ticket releases the request's in-flight count (and whatever it still holds).
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "discovery/pod_set.h"
#include "index/pod_block_ledger.h"
#include "prefixgate/strategy.h"
#include "routing/load_guards.h"
#include "routing/prediction_audit.h"

namespace prefixgate::routing {

class PrefixServices;
struct PromptMatch;

// How an attempt on the chosen pod failed, as far as routing is concerned.
enum class AttemptFailure {
  kNotComputed,    // the engine never began the request (no connection, closed or refused before answering)
  kMaybeComputed,  // it may have (no answer in time, a body cut off after its head)
};

// What a request's engine did, as the relay saw it.
struct Completion {
  int status = 0;                   // the engine's status (or the gateway's error status when it gave none)
  double first_byte_seconds = -1;   // request start to the engine's response head; -1 = none
  double first_body_seconds = -1;   // request start to the first body byte (a stream's first token); -1 = none
  std::optional<uint64_t> prompt_tokens;  // the engine's usage.prompt_tokens (or llama.cpp's timings)
  std::optional<uint64_t> cached_tokens;  // usage.prompt_tokens_details.cached_tokens
  uint64_t output_tokens = 0;       // counted on the way through
  double end_seconds = -1;          // the attempt's start to the response's end (how long the pod served it); -1 = none
};

// A request that waits for a slot engine's busy slot holding its prefix (index::PodBlockLedger::SlotTurn; the
// Router queues it there when the wait scorer counted on that slot, routing.prefix_cache.slot_wait_ms): the session
// waits for its turn before sending. Thread-safe: the turn comes on the thread whose request freed the slot.
class SlotTurn final : public index::PodBlockLedger::SlotTurn {
 public:
  void ready() override;
  // Runs `on_ready` at the turn: true (and nothing run) when it has come already; false when it will run later,
  // once, on the releasing thread, unless cancel() comes first.
  bool whenReady(std::function<void()> on_ready);
  // The waiter stopped waiting (its time ran out): `on_ready` will not run after this returns.
  void cancel();

 private:
  std::mutex mutex_;
  bool ready_ = false;
  std::function<void()> on_ready_;
};

class Ticket {
 public:
  // The pod's work when the request was sent (ServiceRates' inputs): prefill tokens queued ahead of it, its own
  // (predicted uncached) tokens, requests decoding.
  struct Sent {
    double prefill_ahead_tokens = 0;
    double own_tokens = 0;
    double decoding = 0;
  };
  // What the decision predicted and counted, for the feedback and for callers (the log, the quota).
  struct Facts {
    std::string model;
    bool stream = false;
    // The gateway's count of the prompt in engine tokens (the hashed prompt's, else estimated from its bytes): what
    // the pod's in-flight count carries, and what an API key is charged when the response reports no usage.
    int64_t prompt_tokens = -1;
    double predicted_cached_fraction = NAN;  // the chosen pod's predicted share of the prompt; NaN = no prediction
    double slot_held_fraction = NAN;  // a slot engine's slots' share of the prompt when chosen; NaN = not one
    int64_t encoded_prompt_bytes = -1;  // the hashed prompt's size in the index's encoding; -1 = not hashed
    uint32_t held_blocks = 0;           // blocks of the prompt the pod was predicted to hold before this request
    Sent sent;
  };

  Ticket() = default;
  Ticket(Ticket&&) noexcept = default;
  Ticket& operator=(Ticket&&) noexcept = default;
  ~Ticket() = default;

  void firstByte();
  void attemptFailed(AttemptFailure kind);
  std::optional<PredictionAudit> completed(const Completion& completion);
  // The decision's part of the request is over before the request is (a disaggregated request's prefill leg,
  // answered): its in-flight count and holds are released now, and it learns nothing more.
  void end() { *this = Ticket{}; }

  const Facts& facts() const { return facts_; }
  // Whether the request still counts as prefill work queued at the pod (before firstByte or a failure).
  bool prefilling() const { return prefill_.pod() != nullptr; }
  // Set when the request was queued for a busy slot of its pod (see SlotTurn): wait for the turn before sending.
  const std::shared_ptr<SlotTurn>& slotTurn() const { return slot_turn_; }
  // The wait is over (the turn came, or the waiter gave up): the ledger's queue no longer holds the request.
  void endSlotWait() {
    if (slot_turn_) slot_turn_->cancel();
    slot_turn_.reset();
  }

 private:
  friend class Router;
  void noteSlotCacheEvidence(uint64_t prompt_tokens, uint64_t cached_tokens);

  discovery::PodPtr pod_;
  Strategy* strategy_ = nullptr;
  PrefixServices* prefix_ = nullptr;  // null when the decision hashed no prompt
  std::shared_ptr<const PromptMatch> prompt_;
  const std::function<int64_t()>* now_ms_ = nullptr;  // the Router's clock
  Facts facts_;
  InFlightGuard in_flight_;  // from the moment of choice to the ticket's end
  PrefillGuard prefill_;     // until the first byte (or a failure)
  std::unique_ptr<PendingRequest> pending_;         // KV event mode's hold on the blocks, until the first byte
  std::unique_ptr<PendingRequest> held_until_end_;  // a slot engine's slot, busy with the request
  std::shared_ptr<SlotTurn> slot_turn_;             // its turn in that slot, when it was queued there
};

// What one slot engine's response says of its cache beyond its slots: true (a host prompt cache) when it served
// more cached tokens than any of its slots held of the prompt when it was routed (`slot_held_fraction` of its
// `prompt_tokens`); false (slots only) when it served no more than they held where the gateway's routing history
// promised more (`predicted_fraction`); nullopt when it tells nothing. Both beyond a margin for block rounding: a
// tenth of the prompt, at least kSlotCacheMarginTokens. Pure (unit-tested).
inline constexpr double kSlotCacheMarginTokens = 64;
std::optional<bool> slotCacheEvidence(double slot_held_fraction, double predicted_fraction, uint64_t prompt_tokens,
                                      uint64_t cached_tokens);

}  // namespace prefixgate::routing
