#pragma once
// Decisions at large fleets (routing.max_scored_pods): above that many pods serving a model's leg, a decision
// scores the pods that hold a prefix match of the prompt plus a small random sample of the others
// (routing.sampled_pods: power-of-k-choices, the strategy picks among them), so its cost follows the pods it
// scores, not the fleet. What depends only on the pod set (which pods serve the model and the leg, their ids, where
// each sits in the list) is built once per pod-set snapshot, per thread, instead of once per decision.
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "discovery/pod_set.h"
#include "prefixgate/strategy.h"

namespace prefixgate::routing {

struct CandidateFilter;
struct FilteredCandidates;

// The pods one model's decisions for one leg draw from, as one snapshot has them (ready or not).
struct ServingPods {
  std::vector<discovery::PodPtr> pods;
  std::vector<Candidate> skeleton;  // per pod, in pods' order: pod and pod_id only (what hashPrompt and match read)
  std::vector<PodId> ids;           // per pod, in pods' order: a contiguous list for the index's holder search
  std::unordered_map<const discovery::PodState*, uint32_t> position;  // a pod's index in pods
  std::unordered_map<uint32_t, uint32_t> by_id;                       // PodId::value -> index in pods
};

// A pod of ServingPods::pods (its index) that holds `blocks` leading blocks of the prompt.
struct HeldPrefix {
  uint32_t position = 0;
  uint32_t blocks = 0;
};

// The ServingPods of the snapshot the calling thread decided with last. One per thread (Router::decide's is
// thread_local): no lock on the request path. A new snapshot (PodRegistry::update) drops everything built for the
// old one, so a removed pod is never drawn again; the old snapshot is held until then.
class ServingPodsCache {
 public:
  // `snapshot`'s pods that serve `model` and the leg (servesLeg with `disaggregated`); null when none serves it.
  const ServingPods* get(const std::shared_ptr<const discovery::PodSet>& snapshot, std::string_view model,
                         PodRole leg, bool disaggregated);
  // routing::panicking over every pod of `model` in `snapshot` (get() first), recomputed only when `now_ms` moved
  // on since the last answer for it: a sampled decision does not read every pod's health, and health changes
  // (checks every few seconds, ejections of milliseconds) are seen at the next millisecond.
  bool panicking(std::string_view model, uint32_t threshold_percent, int64_t now_ms);

 private:
  struct ModelEntry {
    const std::vector<discovery::PodPtr>* serving = nullptr;  // the snapshot's pods of the model
    std::unique_ptr<ServingPods> legs[3];                     // by legKind
    int64_t panic_ms = INT64_MIN;
    uint32_t panic_threshold = 0;
    bool panic = false;
  };
  std::shared_ptr<const discovery::PodSet> snapshot_;
  std::map<std::string, ModelEntry, std::less<>> models_;
};

// The sampled candidates of one decision: the pods of `serving` that hold a match (`held`, at most `max_scored` of
// the longest; reordered) and pass `filter`, plus up to `sample` others drawn at random with `rng` that pass it
// (at most 4 x `sample` draws). `panic`: ServingPodsCache::panicking. Returns false, leaving `out` empty, when
// the draws found fewer than `sample` usable pods (most pods are not ready, excluded or full: the caller then
// filters every pod, as below the threshold). `held` is empty when the strategy matches no prompt.
bool sampleCandidates(const ServingPods& serving, std::span<HeldPrefix> held, const CandidateFilter& filter,
                      bool panic, uint32_t max_scored, uint32_t sample, std::mt19937_64& rng, FilteredCandidates& out);

}  // namespace prefixgate::routing
