#pragma once
// Other replicas name pods by address (state_sync.h): the pod this replica routes to at an address, or none.
#include <memory>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "discovery/pod_set.h"

namespace prefixgate::sync {

// Indexes the registry's current pod set by address, again whenever the set changes. Sync thread only.
class PodLookup {
 public:
  explicit PodLookup(discovery::PodRegistry& pods) : pods_(pods) {}

  // The pod at `address`; null when this replica does not route to it. Valid until the next call.
  discovery::PodState* find(std::string_view address) {
    std::shared_ptr<const discovery::PodSet> now = pods_.snapshot();
    if (now != seen_) {
      seen_ = std::move(now);
      by_address_.clear();
      for (const discovery::PodPtr& pod : seen_->pods()) by_address_[pod->spec().address] = pod.get();
    }
    auto it = by_address_.find(address);
    return it == by_address_.end() ? nullptr : it->second;
  }

 private:
  discovery::PodRegistry& pods_;
  std::shared_ptr<const discovery::PodSet> seen_;
  std::unordered_map<std::string_view, discovery::PodState*> by_address_;  // views into seen_'s specs
};

}  // namespace prefixgate::sync
