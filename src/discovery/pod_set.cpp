#include "discovery/pod_set.h"

#include <algorithm>
#include <map>
#include <set>

#include "util/log.h"

namespace prefixgate::discovery {

std::string changedFields(const PodSpec& before, const PodSpec& after) {
  std::string out;
  auto note = [&](bool differs, std::string_view field) {
    if (!differs) return;
    if (!out.empty()) out += ", ";
    out += field;
  };
  note(before.name != after.name, "name");
  note(before.address != after.address, "address");
  note(before.models != after.models, "models");
  note(before.kv_events != after.kv_events, "kv_events");
  note(before.kv_replay != after.kv_replay, "kv_replay");
  note(before.kv_capacity_tokens != after.kv_capacity_tokens, "kv_capacity_tokens");
  note(before.data_parallel_size != after.data_parallel_size, "data_parallel_size");
  note(before.engine != after.engine, "engine");
  note(before.role != after.role, "role");
  return out;
}

std::vector<std::string> undecodableModels(const std::vector<PodSpec>& pods) {
  std::map<std::string, std::string> prefill_pods;  // by model: its prefill pods' names, joined
  std::set<std::string> decodable;
  for (const PodSpec& pod : pods)
    for (const std::string& model : pod.models) {
      if (pod.role != PodRole::kPrefill) {
        decodable.insert(model);
        continue;
      }
      std::string& names = prefill_pods[model];
      names += (names.empty() ? "" : ", ") + pod.name;
    }
  std::vector<std::string> out;
  for (const auto& [model, names] : prefill_pods)
    if (!decodable.count(model))
      out.push_back("model '" + model + "': prefill pods " + names +
                    " but no pod with role decode or both (its requests could never be decoded)");
  return out;
}

PodState::PodState(PodId id, PodSpec spec) : id_(id) {
  spec_versions_.push_back(std::make_unique<const PodSpec>(std::move(spec)));
  spec_.store(spec_versions_.back().get(), std::memory_order_release);
}

bool PodState::updateSpec(PodSpec spec) {
  if (spec_versions_.size() >= kMaxSpecVersions) return false;
  spec_versions_.push_back(std::make_unique<const PodSpec>(std::move(spec)));
  spec_.store(spec_versions_.back().get(), std::memory_order_release);
  return true;
}

void PodState::recordHealth(bool ok, uint32_t healthy_threshold, uint32_t unhealthy_threshold) {
  checked_.store(true, std::memory_order_relaxed);
  if (ok) {
    failures_.store(0, std::memory_order_relaxed);
    uint32_t passes = passes_.fetch_add(1, std::memory_order_relaxed) + 1;
    // A passing check does not end a passive ejection: a pod whose /health passes while its requests fail
    // must still wait out its back-off.
    if (passes >= healthy_threshold) healthy_.store(true, std::memory_order_relaxed);
  } else {
    passes_.store(0, std::memory_order_relaxed);
    uint32_t failures = failures_.fetch_add(1, std::memory_order_relaxed) + 1;
    // A pod never yet seen healthy is not ready; one that was needs `unhealthy_threshold` failures in a row.
    if (failures >= unhealthy_threshold) healthy_.store(false, std::memory_order_relaxed);
  }
}

bool PodState::recordPodFailure(const config::HealthCheckConfig& config) {
  std::lock_guard lock(passive_mutex_);
  passive_clean_.store(false, std::memory_order_relaxed);
  return passive_.podFailed(config);
}

bool PodState::recordRequestFailure(uint64_t request_hash, const config::HealthCheckConfig& config) {
  std::lock_guard lock(passive_mutex_);
  passive_clean_.store(false, std::memory_order_relaxed);
  return passive_.requestFailed(request_hash, config);
}

void PodState::recordSuccess() {
  if (passive_clean_.load(std::memory_order_relaxed)) return;
  std::lock_guard lock(passive_mutex_);
  passive_.succeeded();
  passive_clean_.store(true, std::memory_order_relaxed);
}

void PodState::ejectPassively(int64_t now_ms, const config::HealthCheckConfig& config) {
  std::lock_guard lock(passive_mutex_);
  passive_clean_.store(false, std::memory_order_relaxed);
  eject(now_ms + passive_.ejected(config));
}

uint32_t PodState::ejections() const {
  std::lock_guard lock(passive_mutex_);
  return passive_.ejections();
}

PodSet::PodSet(std::vector<PodPtr> pods) : pods_(std::move(pods)) {
  std::set<std::string> models;
  for (const PodPtr& pod : pods_) {
    for (const std::string& m : pod->spec().models) {
      by_model_[m].push_back(pod);
      models.insert(m);
    }
  }
  models_.assign(models.begin(), models.end());
  for (const auto& entry : by_model_) {
    const std::vector<PodPtr>& serving = entry.second;
    const auto has = [&serving](PodRole role) {
      return std::any_of(serving.begin(), serving.end(), [role](const PodPtr& p) { return p->spec().role == role; });
    };
    if (has(PodRole::kPrefill) && has(PodRole::kDecode)) disaggregated_.insert(entry.first);
  }
}

bool PodSet::disaggregated(std::string_view model) const {
  return !disaggregated_.empty() && disaggregated_.find(model) != disaggregated_.end();
}

const std::vector<PodPtr>* PodSet::podsFor(std::string_view model) const {
  auto it = by_model_.find(model);
  return it == by_model_.end() ? nullptr : &it->second;
}

PodPtr PodSet::find(std::string_view name) const {
  for (const PodPtr& p : pods_)
    if (p->name() == name) return p;
  return nullptr;
}

namespace {

std::atomic<uint64_t> next_registry_instance{1};

struct CachedSnapshot {
  uint64_t instance = 0;
  uint64_t version = 0;
  std::shared_ptr<const PodSet> set;
};
thread_local CachedSnapshot cached_snapshot;

}  // namespace

PodRegistry::PodRegistry()
    : current_(std::make_shared<const PodSet>(std::vector<PodPtr>{})),
      instance_(next_registry_instance.fetch_add(1, std::memory_order_relaxed)) {}

std::shared_ptr<const PodSet> PodRegistry::snapshot() const {
  // The version is read before the pointer: a thread that sees a bump loads at least the set stored before it.
  const uint64_t version = version_.load(std::memory_order_acquire);
  CachedSnapshot& cached = cached_snapshot;
  if (cached.instance != instance_ || cached.version != version || !cached.set) {
    cached.set = current_.load(std::memory_order_acquire);
    cached.instance = instance_;
    cached.version = version;
  }
  return cached.set;
}

void PodRegistry::onRemoved(RemovedListener listener) {
  std::lock_guard lock(update_mutex_);
  removed_listeners_.push_back(std::move(listener));
}

void PodRegistry::onAdded(AddedListener listener) {
  std::lock_guard lock(update_mutex_);
  added_listeners_.push_back(std::move(listener));
}

void PodRegistry::onChanged(ChangedListener listener) {
  std::lock_guard lock(update_mutex_);
  changed_listeners_.push_back(std::move(listener));
}

namespace {

// Applies an edit of `pod` (the same name and address) in place, noting it in `changed`; false when the pod has
// been edited too often to keep (PodState::kMaxSpecVersions): it is then replaced.
bool keepsState(const PodPtr& pod, const PodSpec& spec, std::vector<std::pair<PodPtr, PodSpec>>& changed) {
  PodSpec before = pod->spec();
  if (!pod->updateSpec(spec)) {
    log::warn("pod {} ({}): edited {} times; this edit replaces it (a new state)", spec.name, spec.address,
              PodState::kMaxSpecVersions);
    return false;
  }
  log::info("pod {} ({}): {} changed; it keeps its state (health, counts, prefix records)", spec.name, spec.address,
            changedFields(before, spec));
  changed.emplace_back(pod, std::move(before));
  return true;
}

}  // namespace

void PodRegistry::update(std::vector<PodSpec> specs) {
  std::lock_guard lock(update_mutex_);
  auto old = snapshot();
  std::vector<PodPtr> next;
  std::vector<PodPtr> added;
  std::vector<std::pair<PodPtr, PodSpec>> changed;  // with the spec before
  next.reserve(specs.size());
  for (PodSpec& spec : specs) {
    PodPtr existing = old->find(spec.name);
    if (existing && existing->spec() == spec) {
      next.push_back(existing);
    } else if (existing && existing->spec().sameIdentity(spec) && keepsState(existing, spec, changed)) {
      next.push_back(existing);
    } else {
      auto pod = std::make_shared<PodState>(PodId{next_id_++}, std::move(spec));
      next.push_back(pod);
      added.push_back(pod);
    }
  }
  std::vector<PodPtr> removed;
  for (const PodPtr& pod : old->pods()) {
    bool kept = std::any_of(next.begin(), next.end(), [&](const PodPtr& p) { return p == pod; });
    if (!kept) removed.push_back(pod);
  }
  current_.store(std::make_shared<const PodSet>(std::move(next)), std::memory_order_release);
  version_.fetch_add(1, std::memory_order_release);
  for (const PodPtr& pod : removed) {
    pod->markRemoved();
    for (auto& l : removed_listeners_) l(pod->id());
  }
  for (const PodPtr& pod : added)
    for (auto& l : added_listeners_) l(pod);
  for (const auto& [pod, before] : changed)
    for (auto& l : changed_listeners_) l(pod, before);
}

}  // namespace prefixgate::discovery
