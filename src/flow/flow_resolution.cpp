#include "flow/flow_resolution.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

namespace prefixgate::flow {
namespace {

bool validTenant(std::string_view name) {
  if (name.size() > kMaxTenantNameBytes) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte >= 0x20 && byte <= 0x7e;
  });
}

std::string_view trimmed(std::string_view value) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
  return value;
}

// Digits only (no sign, no fraction); values past uint32 saturate, to be clamped like any other.
std::optional<uint32_t> parseMilliseconds(std::string_view value) {
  value = trimmed(value);
  if (value.empty()) return std::nullopt;
  uint64_t result = 0;
  for (char c : value) {
    if (c < '0' || c > '9') return std::nullopt;
    result = std::min<uint64_t>(result * 10 + static_cast<uint64_t>(c - '0'), std::numeric_limits<uint32_t>::max());
  }
  return static_cast<uint32_t>(result);
}

std::optional<size_t> classIndex(const std::vector<ClassSpec>& classes, std::string_view name) {
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].name == name) return i;
  }
  return std::nullopt;
}

std::string classNames(const std::vector<ClassSpec>& classes) {
  std::string names;
  for (const ClassSpec& c : classes) {
    if (!names.empty()) names += ", ";
    names += c.name;
  }
  return names;
}

}  // namespace

ResolvedFlow resolveFlow(const FlowRequest& request, const FlowConfig& config) {
  ResolvedFlow out;
  const std::vector<ClassSpec> classes = classesOf(config);

  std::string_view tenant = kDefaultTenant;
  std::string_view tenant_source;
  if (!request.api_key_name.empty()) {
    tenant = request.api_key_name;
    tenant_source = "API key name";
  } else if (!request.tenant_header.empty()) {
    tenant = request.tenant_header;
    tenant_source = config.tenant_header;
  } else if (!request.body_user.empty()) {
    tenant = request.body_user;
    tenant_source = "user";
  }
  if (!validTenant(tenant)) {
    out.error = fmt::format("{}: the tenant name must be at most {} bytes of printable ASCII", tenant_source,
                            kMaxTenantNameBytes);
    return out;
  }
  out.tenant = std::string(tenant);

  if (!request.key_priority_class.empty()) {
    const std::optional<size_t> index = classIndex(classes, request.key_priority_class);
    if (!index) {
      out.error = fmt::format("API key '{}': unknown priority class '{}' (classes: {})", request.api_key_name,
                              request.key_priority_class, classNames(classes));
      return out;
    }
    out.class_index = *index;
  } else if (!request.priority_header.empty()) {
    const std::optional<size_t> index = classIndex(classes, trimmed(request.priority_header));
    if (!index) {
      out.error = fmt::format("{}: unknown priority class '{}' (classes: {})", kPriorityHeader,
                              request.priority_header, classNames(classes));
      return out;
    }
    out.class_index = *index;
  } else {
    out.class_index = defaultClassIndex(config);
  }

  std::optional<uint32_t> ttft;
  if (request.key_ttft_slo_ms != 0) {
    ttft = request.key_ttft_slo_ms;
  } else if (request.model_ttft_slo_ms != 0) {
    ttft = request.model_ttft_slo_ms;
  } else if (!request.slo_ttft_header.empty()) {
    ttft = parseMilliseconds(request.slo_ttft_header);
    if (!ttft) {
      out.error = fmt::format("{}: '{}' is not a whole number of milliseconds >= 0", kSloTtftHeader,
                              request.slo_ttft_header);
      return out;
    }
  } else if (classes[out.class_index].ttft_slo_ms != 0) {
    ttft = classes[out.class_index].ttft_slo_ms;
  }
  // Not std::clamp: that is undefined for min > max, which only validateFlowConfig rules out.
  if (ttft) out.ttft_slo_ms = std::max(config.min_ttft_slo_ms, std::min(*ttft, config.max_ttft_slo_ms));
  return out;
}

}  // namespace prefixgate::flow
