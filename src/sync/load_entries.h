#pragma once
// The replicas' in-flight counts as they travel through Redis (state_sync.h publishes and reads them): one
// replica's text is "<pod address> <count>\n" per pod. Pure functions, fuzzed alone (tests/fuzz/load_entries_fuzz).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace prefixgate::sync {

// In-flight counts by replica: one replica's published text is "<pod address> <count>\n" per pod with requests in
// flight. Pure.
std::string encodeLoads(const std::vector<std::pair<std::string, int32_t>>& loads);
// The most that one replica's count, or the sum over replicas, may say is in flight to a pod. The counts come
// through Redis, which anything that reaches it can write: each is clamped and every sum saturates here, so no
// value read can wrap a pod's count (2147483647 + 2 once made one negative and let requests past
// limits.max_in_flight_per_pod). Far above any engine's concurrency, far below where the pod's own int32 sums of
// local and remote counts (discovery/pod_set.h) could overflow.
inline constexpr int32_t kMaxRemoteInFlight = 1 << 20;
// The other live replicas a pod's count is told about (pod_set.h adds, for each, what this replica routed there
// since the read); the replicas set may name any number.
inline constexpr int32_t kMaxOtherReplicas = 1 << 10;
// Adds each "<address> <count>" line of `text` to `out`. A count is a decimal integer (64 bits; anything else, a
// count below 1, or a line without an address is skipped), clamped to kMaxRemoteInFlight; sums saturate there.
void decodeLoads(std::string_view text, std::map<std::string, int32_t, std::less<>>& out);
// a + b with each taken as 0 below 0 and kMaxRemoteInFlight above it, saturating at kMaxRemoteInFlight.
int32_t addLoads(int64_t a, int64_t b);
// A pod's count over the other replicas (their counts by replica id), saturating at kMaxRemoteInFlight.
int32_t sumLoads(const std::map<std::string, int32_t, std::less<>>& by_replica);

}  // namespace prefixgate::sync
