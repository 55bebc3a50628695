#pragma once
// What the KV event index tests share: a clock that never moves, runs of distinct token ids, a message.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "engine/kv_event_decoder.h"
#include "prefixgate/types.h"
#include "unit/token_runs.h"

namespace prefixgate::testing {

class FixedClock final : public Clock {
 public:
  SteadyTime now() const override { return SteadyTime{}; }
};

// One publisher message of `events`, from data-parallel rank `rank` (none: a publisher without ranks).
inline engine::KvEventBatch batch(std::vector<engine::KvCacheEvent> events,
                                  std::optional<uint32_t> rank = std::nullopt) {
  engine::KvEventBatch b;
  b.events = std::move(events);
  b.data_parallel_rank = rank;
  return b;
}

}  // namespace prefixgate::testing
