#pragma once
// A queue test helper: pops everything, returning the tenants in dispatch order (each dispatched item finishes with
// no output).
#include <string>

#include "flow/fair_queue.h"

namespace prefixgate::flow::testing {

inline std::string drainTenants(FairQueue& queue) {
  std::string order;
  while (auto next = queue.popNext()) {
    order += next->tenant;
    queue.finished(next->tenant, next->class_index);
  }
  return order;
}

}  // namespace prefixgate::flow::testing
