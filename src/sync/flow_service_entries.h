#pragma once
// The VTC service each replica's queues gave each flow, as it travels through Redis (flow_channel.h publishes and
// reads it; docs/state-sync.md, "Flow service"). One replica's text:
//   PF1\n
//   m\t<flows created>\t<model>\n                      one per model, before its flows
//   f\t<flow seq>\t<total>\t<class>\t<tenant>\n         one per flow
// Pure functions, fuzzed alone (tests/fuzz/flow_service_fuzz).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flow/service_sharing.h"

namespace prefixgate::sync {

// Bounds on what one replica publishes and what is read from one: the text, the flows in it, a model's or a
// class's name (a tenant's is flow::kMaxTenantNameBytes of printable ASCII, as flow resolution requires), and a
// total (far above what any flow is served in a replica's life, and where doubles still count single tokens).
inline constexpr size_t kMaxFlowServiceBytes = size_t{256} << 10;
inline constexpr size_t kMaxFlowServiceFlows = 1024;
inline constexpr size_t kMaxFlowServiceNameBytes = 256;
inline constexpr double kMaxFlowServiceTotal = 1e15;

// The text for `models`, within kMaxFlowServiceBytes: flows past that, or past kMaxFlowServiceFlows, are left out,
// and so are names the text cannot carry (a tab, a newline or another control byte; too long) and totals that are
// not finite or not above 0.
std::string encodeFlowService(const std::vector<flow::ModelService>& models);

enum class FlowServiceDecode { kOk, kTooLarge, kMalformed };
// Why a text was dropped, for the metric's label: too_large, malformed.
std::string_view flowServiceDropLabel(FlowServiceDecode result);
// Reads one replica's text into `out` (cleared first; left empty unless kOk). Anything another replica would not
// publish drops the whole text: over kMaxFlowServiceBytes (kTooLarge); a wrong header, a line that is not one of
// the two forms, a flow before any model, a name or a tenant out of bounds, a number that is not a plain decimal
// (a total may have a fraction and an exponent, but must be finite and >= 0), more than kMaxFlowServiceFlows flows,
// or a model or a (class, tenant) listed twice (kMalformed). Totals above kMaxFlowServiceTotal are clamped to it.
FlowServiceDecode decodeFlowService(std::string_view text, std::vector<flow::ModelService>& out);

}  // namespace prefixgate::sync
