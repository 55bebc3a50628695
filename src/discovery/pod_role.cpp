#include "discovery/pod_role.h"

namespace prefixgate::discovery {

std::string_view roleName(PodRole role) {
  switch (role) {
    case PodRole::kPrefill: return "prefill";
    case PodRole::kDecode: return "decode";
    case PodRole::kBoth: break;
  }
  return "both";
}

std::optional<PodRole> parseRole(std::string_view name) {
  for (PodRole role : {PodRole::kBoth, PodRole::kPrefill, PodRole::kDecode})
    if (name == roleName(role)) return role;
  if (name == "prefill-decode") return PodRole::kBoth;  // llm-d's name for a pod serving both legs
  return std::nullopt;
}

}  // namespace prefixgate::discovery
