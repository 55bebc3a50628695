// The filter every decision runs before its strategy (router.h): every pod of the model below
// routing.max_scored_pods, the pods holding a match plus a random sample above it (pod_sample.h).
#include <algorithm>
#include <cmath>

#include "routing/load_score.h"
#include "routing/pod_sample.h"
#include "routing/router.h"
#include "util/thread_spares.h"

namespace prefixgate::routing {
namespace {

// A candidate as the decision starts: the in-flight count (every replica's, with state sync), this gateway's
// in-flight tokens and, when recent enough, the engine's load.
// Filled in place in the candidates' vector (no 150-byte copy per pod).
void fillCandidate(Candidate& c, const discovery::PodState& pod, int64_t now_ms, int64_t max_engine_age_ms) {
  c.pod = &pod;
  c.pod_id = pod.id();
  const PodSignals& signals = pod.signals();
  c.in_flight = signals.inFlightAllReplicas();
  c.in_flight_tokens = static_cast<double>(std::max<int64_t>(0, signals.inFlightTokens()));
  c.prefill_requests = std::max(0, signals.prefillRequests());
  c.prefill_tokens = static_cast<double>(std::max<int64_t>(0, signals.prefillTokens()));
  const engine::EngineLoadView view = pod.engine().view();
  if (view.fresh(now_ms, max_engine_age_ms)) {
    c.waiting = std::isnan(view.waiting) ? 0 : view.waiting;
    c.kv_usage = view.kv_usage;
  }
  c.capacity = view.capacity;
}

// With state sync, the other replicas' requests in flight to each candidate count at the mean prompt tokens of
// this gateway's own requests in flight to `pods` (only their counts cross Redis).
template <class Pods, class Get>
void addOtherReplicasTokens(const Pods& pods, Get get, std::vector<Candidate>& candidates) {
  int64_t tokens = 0, requests = 0;
  for (const auto& pod : pods) {
    tokens += std::max<int64_t>(0, get(pod).signals().inFlightTokens());
    requests += std::max(0, get(pod).signals().inFlight());
  }
  if (requests == 0) return;
  const double per_request = static_cast<double>(tokens) / static_cast<double>(requests);
  for (Candidate& c : candidates)
    c.in_flight_tokens += std::max(0, c.in_flight - c.pod->signals().inFlight()) * per_request;
}

enum class Admission { kAdmitted, kOut, kFull };

// One pod through the filter (the role is checked by the caller): ready (in panic: healthy and not removed), not
// excluded, under the per-pod bound. An admitted pod is filled in at the end of `out`.
Admission admit(const discovery::PodState& pod, const CandidateFilter& filter, bool panic, std::vector<Candidate>& out) {
  if (!(panic ? pod.healthy() && !pod.removed() : pod.ready(filter.now_ms))) return Admission::kOut;
  if (std::find(filter.exclude.begin(), filter.exclude.end(), pod.id()) != filter.exclude.end()) return Admission::kOut;
  // The per-pod queue bound (limits.max_in_flight_per_pod): a full pod takes no more.
  if (filter.max_in_flight_per_pod > 0 && pod.signals().inFlightAllReplicas() >= filter.max_in_flight_per_pod)
    return Admission::kFull;
  fillCandidate(out.emplace_back(), pod, filter.now_ms, filter.max_engine_age_ms);
  return Admission::kAdmitted;
}

// The load steps after the candidates are read: capacity-aware scores, the KV-critical filter, the imbalance gate.
void finish(FilteredCandidates& out, const CandidateFilter& filter) {
  // A pod whose KV cache is nearly full (infinite capacity-aware score) is not a candidate unless every pod is.
  // The scores stay on the candidates: load-aware strategies use them as computed with this request's settings.
  capacityLoadScores(out.candidates, filter.load_balance);
  excludeInfiniteLoad(out.candidates, out.excluded);
  // Before any strategy: when load is severely skewed, only the least-loaded pods stay candidates.
  applyImbalanceGate(out.candidates, filter.load_imbalance);
}

bool otherReplicas(const Candidate& c) { return c.in_flight > c.pod->signals().inFlight(); }

}  // namespace

bool servesLeg(PodRole role, PodRole leg, bool disaggregated) {
  switch (leg) {
    case PodRole::kPrefill: return role != PodRole::kDecode;
    case PodRole::kDecode: return role != PodRole::kPrefill;
    case PodRole::kBoth: break;
  }
  // A whole request of a disaggregated model is decoded where it is prefilled: not on a prefill pod, which would
  // hold the KV cache of a long decode that decode pods are there for.
  return !disaggregated || role != PodRole::kPrefill;
}

FilteredCandidates filterCandidates(std::span<const discovery::PodPtr> serving, const CandidateFilter& filter) {
  FilteredCandidates out;
  const bool panic = panicking(serving, filter.panic_threshold_percent, filter.now_ms);
  bool other_replicas = false;
  out.candidates = util::VectorPool<Candidate>::take();  // a finished decision's (Decision::~Decision)
  out.candidates.reserve(serving.size());
  // Roles matter only to a leg or to a disaggregated model's whole request (the spec is not read otherwise).
  const bool by_role = filter.leg != PodRole::kBoth || filter.disaggregated;
  for (const discovery::PodPtr& pod : serving) {
    if (by_role && !servesLeg(pod->spec().role, filter.leg, filter.disaggregated)) continue;
    const Admission a = admit(*pod, filter, panic, out.candidates);
    if (a == Admission::kFull) ++out.full;
    if (a == Admission::kAdmitted) other_replicas |= otherReplicas(out.candidates.back());
  }
  if (out.candidates.empty()) return out;
  if (other_replicas)
    addOtherReplicasTokens(serving, [](const discovery::PodPtr& p) -> const discovery::PodState& { return *p; },
                           out.candidates);
  finish(out, filter);
  return out;
}

bool sampleCandidates(const ServingPods& serving, std::span<HeldPrefix> held, const CandidateFilter& filter,
                      bool panic, uint32_t max_scored, uint32_t sample, std::mt19937_64& rng, FilteredCandidates& out) {
  const size_t n = serving.pods.size();
  // More holders than may be scored (a prefix every pod holds): the longest matches.
  if (held.size() > max_scored) {
    std::nth_element(held.begin(), held.begin() + max_scored, held.end(),
                     [](const HeldPrefix& a, const HeldPrefix& b) { return a.blocks > b.blocks; });
    held = held.first(max_scored);
  }
  // Positions taken (holders, then draws): a short list, searched linearly.
  thread_local std::vector<uint32_t> taken;
  taken.clear();
  for (const HeldPrefix& h : held)
    if (h.blocks > 0 && h.position < n) taken.push_back(h.position);
  const size_t holders = taken.size();
  // Power-of-k-choices: `sample` usable pods drawn at random; the strategy weighs them with the holders. The first
  // draws are made before any pod is read, so that the pods' state (cold in a large fleet) loads all at once.
  std::uniform_int_distribution<uint32_t> draw(0, static_cast<uint32_t>(n - 1));
  uint32_t tries = 0;
  auto drawOne = [&] {
    const uint32_t i = draw(rng);
    ++tries;
    if (std::find(taken.begin(), taken.end(), i) != taken.end()) return false;
    taken.push_back(i);
    return true;
  };
  while (taken.size() - holders < sample && tries < 4 * sample) drawOne();
  for (uint32_t i : taken) {
    const discovery::PodState& pod = *serving.pods[i];
    __builtin_prefetch(&pod);
    __builtin_prefetch(&pod.signals());
    __builtin_prefetch(&pod.engine());
  }
  out.candidates = util::VectorPool<Candidate>::take();  // a finished decision's (Decision::~Decision)
  out.candidates.reserve(taken.size() + sample);
  bool other_replicas = false;
  uint32_t found = 0;
  for (size_t t = 0; t < taken.size(); ++t) {
    if (admit(*serving.pods[taken[t]], filter, panic, out.candidates) != Admission::kAdmitted) continue;
    other_replicas |= otherReplicas(out.candidates.back());
    if (t >= holders) ++found;
  }
  while (found < sample && tries < 4 * sample) {
    if (!drawOne() || admit(*serving.pods[taken.back()], filter, panic, out.candidates) != Admission::kAdmitted)
      continue;
    other_replicas |= otherReplicas(out.candidates.back());
    ++found;
  }
  if (found < sample) {
    out = {};
    return false;
  }
  if (other_replicas)
    addOtherReplicasTokens(out.candidates, [](const Candidate& c) -> const discovery::PodState& { return *c.pod; },
                           out.candidates);
  finish(out, filter);
  return true;
}

bool panicking(std::span<const discovery::PodPtr> serving, uint32_t threshold_percent, int64_t now_ms) {
  uint64_t live = 0;
  uint64_t ready = 0;
  for (const discovery::PodPtr& pod : serving) {
    if (pod->removed()) continue;
    ++live;
    if (pod->ready(now_ms)) ++ready;
  }
  return ready * 100 < uint64_t{threshold_percent} * live;
}

}  // namespace prefixgate::routing
