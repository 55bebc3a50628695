#pragma once
// Which flow a request belongs to: its tenant, its priority class and its TTFT objective. A pure function of
// what the gateway already knows about the request (API key, headers, body, model settings) and the config, so
// the precedence rules are tested without HTTP. Thread-safe (no state).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "flow/flow_config.h"

namespace prefixgate::flow {

inline constexpr std::string_view kPriorityHeader = "x-request-priority";
inline constexpr std::string_view kSloTtftHeader = "x-slo-ttft-ms";
// Tenant names become metric labels: longer ones, or ones with bytes outside printable ASCII, are refused.
inline constexpr size_t kMaxTenantNameBytes = 128;

// What the gateway knows about one request. Empty / 0 = absent. The views must outlive the call only.
struct FlowRequest {
  std::string_view api_key_name = {};          // name of the API key that authenticated it
  std::string_view key_priority_class = {};    // the key's priority class setting
  uint32_t key_ttft_slo_ms = 0;                // the key's TTFT objective setting
  std::string_view tenant_header = {};         // value of FlowConfig::tenant_header
  std::string_view body_user = {};             // the body's `user` field
  std::string_view priority_header = {};       // value of kPriorityHeader
  std::string_view slo_ttft_header = {};       // value of kSloTtftHeader, unparsed
  uint32_t model_ttft_slo_ms = 0;              // the model's TTFT objective setting
};

struct ResolvedFlow {
  std::string tenant;
  size_t class_index = 0;    // into classesOf(config)
  uint32_t ttft_slo_ms = 0;                    // 0 = no objective
  // Non-empty: the request is refused (400) with this message, which names the offending header or field;
  // the other fields are then meaningless.
  std::string error;
};

// Precedence, first present wins:
//   tenant:   API key name, tenant header, body `user`, kDefaultTenant
//   class:    key's class, priority header, defaultClassIndex(config)
//   TTFT:     key's objective, model's objective, SLO header, the class's ttft_slo_ms; clamped to
//             [min_ttft_slo_ms, max_ttft_slo_ms] (an explicit 0 in the header is clamped up, not "none")
// Only the value that wins is checked, so a malformed header that a key overrides is not an error. Errors: a
// tenant longer than kMaxTenantNameBytes or with a byte outside 0x20..0x7e; an unknown class name (in the header,
// or in the key, which config validation should have caught); an SLO header that is not a decimal integer >= 0.
ResolvedFlow resolveFlow(const FlowRequest& request, const FlowConfig& config);

}  // namespace prefixgate::flow
