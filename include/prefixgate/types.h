#pragma once
// Small value types shared by every part of the gateway. Distinct ids get distinct types so that a pod id can
// never be passed where a block hash is expected.
#include <chrono>
#include <cstdint>
#include <functional>

namespace prefixgate {

// A pod's stable id for the life of the process: the same pod name keeps its id across pods-file reloads.
struct PodId {
  uint32_t value = 0;
  friend bool operator==(PodId, PodId) = default;
  friend auto operator<=>(PodId, PodId) = default;
};

// A block hash computed by the gateway (chained XXH64 over the tokenized prompt).
struct BlockHash {
  uint64_t value = 0;
  friend bool operator==(BlockHash, BlockHash) = default;
};

// A block hash as an engine reports it in its KV events (a different hash domain from BlockHash).
struct EngineBlockHash {
  uint64_t value = 0;
  friend bool operator==(EngineBlockHash, EngineBlockHash) = default;
};

// A pod's part in disaggregated prefill/decode (the pods file's `role`, a Kubernetes label): a model with prefill
// pods and decode pods has each request prefilled on one and decoded on another (docs/configuration.md,
// "Disaggregated prefill/decode"); `both` pods serve either leg, and whole requests.
enum class PodRole : uint8_t { kBoth, kPrefill, kDecode };

// The capacity-aware load score's settings (routing.load_balance, with a model's and profile's overrides).
struct LoadBalanceSettings {
  double lambda = 0;
  double alpha = 2.0;
  double kv_critical = 0.10;
};

using SteadyTime = std::chrono::steady_clock::time_point;

// An injectable monotonic clock, so pure cores (index expiry, EWMAs) are tested without sleeps.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime now() const = 0;
};

class SystemClock final : public Clock {
 public:
  SteadyTime now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace prefixgate

template <>
struct std::hash<prefixgate::PodId> {
  size_t operator()(prefixgate::PodId id) const noexcept { return id.value; }
};
template <>
struct std::hash<prefixgate::BlockHash> {
  size_t operator()(prefixgate::BlockHash h) const noexcept { return h.value; }
};
