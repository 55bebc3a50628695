#include "routing/pod_sample.h"

#include "routing/router.h"

namespace prefixgate::routing {
namespace {

// The three pod lists a leg can draw from: every pod (a whole request of a model that is not disaggregated), every
// pod but prefill pods (decode legs, and whole requests of a disaggregated model), every pod but decode pods.
size_t legKind(PodRole leg, bool disaggregated) {
  if (leg == PodRole::kPrefill) return 2;
  return leg == PodRole::kDecode || disaggregated ? 1 : 0;
}

}  // namespace

const ServingPods* ServingPodsCache::get(const std::shared_ptr<const discovery::PodSet>& snapshot,
                                         std::string_view model, PodRole leg, bool disaggregated) {
  if (snapshot_ != snapshot) {
    models_.clear();
    snapshot_ = snapshot;
  }
  auto it = models_.find(model);
  if (it == models_.end()) {
    const std::vector<discovery::PodPtr>* serving = snapshot->podsFor(model);
    if (!serving) return nullptr;
    it = models_.emplace(std::string(model), ModelEntry{}).first;
    it->second.serving = serving;
  }
  ModelEntry& entry = it->second;
  std::unique_ptr<ServingPods>& pods = entry.legs[legKind(leg, disaggregated)];
  if (!pods) {
    pods = std::make_unique<ServingPods>();
    for (const discovery::PodPtr& pod : *entry.serving) {
      if (!servesLeg(pod->spec().role, leg, disaggregated)) continue;
      pods->position.emplace(pod.get(), static_cast<uint32_t>(pods->pods.size()));
      pods->by_id.emplace(pod->id().value, static_cast<uint32_t>(pods->pods.size()));
      pods->pods.push_back(pod);
      pods->skeleton.push_back(Candidate{pod.get(), pod->id()});
      pods->ids.push_back(pod->id());
    }
  }
  return pods.get();
}

bool ServingPodsCache::panicking(std::string_view model, uint32_t threshold_percent, int64_t now_ms) {
  auto it = models_.find(model);
  if (it == models_.end()) return false;
  ModelEntry& entry = it->second;
  if (entry.panic_ms != now_ms || entry.panic_threshold != threshold_percent) {
    entry.panic = routing::panicking(*entry.serving, threshold_percent, now_ms);
    entry.panic_ms = now_ms;
    entry.panic_threshold = threshold_percent;
  }
  return entry.panic;
}

}  // namespace prefixgate::routing
