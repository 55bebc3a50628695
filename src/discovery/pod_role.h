#pragma once
// A pod's role in disaggregated prefill/decode (PodRole, prefixgate/types.h) by name: the pods file's `role`, the
// Kubernetes role label and /debug/pods all use these names. Pure, so the Kubernetes slice parser and its fuzz
// target need nothing else of discovery.
#include <optional>
#include <string_view>

#include "prefixgate/types.h"

namespace prefixgate::discovery {

// A role's name: "prefill", "decode" or "both".
std::string_view roleName(PodRole role);
// The role named `name`: prefill, decode, both, or llm-d's prefill-decode (= both); nullopt for anything else.
std::optional<PodRole> parseRole(std::string_view name);
// What a configuration may say, for error messages.
inline constexpr std::string_view kRoleChoices = "prefill, decode or both";

}  // namespace prefixgate::discovery
