#pragma once
// Predicting at admission whether a request can still meet its TTFT objective (issue 27, item 4; docs/flow-control.md,
// "Objectives predicted at admission"). Every estimate here is a lower bound: a request is shed at once only when
// even the soonest it could see its first token is past its objective, so a prediction that errs sends a request
// on rather than refusing one that could have made it. Pure (unit-tested).
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace prefixgate::flow {

// A duration learned per model as an exponentially weighted mean of the requests that ended: how long a request
// keeps its room once dispatched (from dispatch, or from passing straight through, to its end), and how long a pod
// takes to give it its first token once sent.
class RecentMean {
 public:
  // Samples needed before the mean is used (until then nothing is predicted).
  static constexpr uint32_t kMinSamples = 3;
  static constexpr double kWeight = 0.1;  // of each new sample: about the last ten requests count
  void add(double ms) {
    if (!std::isfinite(ms) || ms < 0) return;
    mean_ms_ = samples_ == 0 ? ms : mean_ms_ + kWeight * (ms - mean_ms_);
    if (samples_ < UINT32_MAX) ++samples_;
  }
  // The mean, or 0 while fewer than kMinSamples requests ended.
  double ms() const { return samples_ >= kMinSamples ? mean_ms_ : 0; }
  uint32_t samples() const { return samples_; }

 private:
  double mean_ms_ = 0;
  uint32_t samples_ = 0;
};

// The soonest a request queued now is dispatched: `ahead` requests certainly go before it (FairQueue::queuedAhead),
// `room` requests the pods could take now (negative: more in flight than their limits), `capacity` requests the
// model's ready pods hold at once, each for `hold_ms` on average. It goes once ahead + 1 - room requests have ended;
// with every slot ending at the mean rate that is (ahead + 1 - room) x hold_ms / capacity. 0 when it would go at once
// or nothing is known (no capacity, no hold time yet).
inline double predictedQueueWaitMs(size_t ahead, int64_t room, int64_t capacity, double hold_ms) {
  if (capacity <= 0 || !(hold_ms > 0)) return 0;
  const double ends_needed = static_cast<double>(ahead) + 1 - static_cast<double>(room);
  if (ends_needed <= 0) return 0;
  return ends_needed * hold_ms / static_cast<double>(capacity);
}

// What admission decides for a request with a TTFT objective, given the lower bounds above and `first_token_ms`, the
// soonest any ready pod answers once sent (the fastest pod's learned fixed time to first token: ServiceRates'
// base). It is refused when even that is past its objective. Once queued it waits at most `queue_budget_ms`: its
// objective less the time a pod typically takes to its first token once sent (`typical_first_token_ms`, the model's
// recent requests' mean, when known and longer than the lower bound): a request dispatched later would most likely
// miss its objective after all, and take a slot from one that could meet its own.
struct ObjectiveCheck {
  bool reachable = true;
  double predicted_ms = 0;       // queue wait + first token, both lower bounds
  double queue_budget_ms = 0;    // objective - the typical first token: the longest wait that can still meet it
};
inline ObjectiveCheck checkObjective(uint32_t objective_ms, double queue_wait_ms, double first_token_ms,
                                     double typical_first_token_ms = 0) {
  ObjectiveCheck check;
  check.predicted_ms = queue_wait_ms + first_token_ms;
  const double typical = typical_first_token_ms > first_token_ms ? typical_first_token_ms : first_token_ms;
  check.queue_budget_ms = static_cast<double>(objective_ms) - typical;
  // Refused on the lower bounds only (a typical time is no certainty); a budget at or below 0 leaves it only the
  // chance of room at once, and it is shed as soon as it would wait.
  check.reachable = objective_ms == 0 ||
                    (check.predicted_ms <= objective_ms && static_cast<double>(objective_ms) > first_token_ms);
  return check;
}

}  // namespace prefixgate::flow
