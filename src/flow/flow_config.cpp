#include "flow/flow_config.h"

#include <fmt/format.h>

namespace prefixgate::flow {

std::vector<ClassSpec> classesOf(const FlowConfig& config) {
  if (!config.classes.empty()) return config.classes;
  return {ClassSpec{std::string(kDefaultClassName)}};
}

std::vector<std::string> classNames(const FlowConfig& config) {
  std::vector<std::string> names;
  for (const ClassSpec& spec : classesOf(config)) names.push_back(spec.name);
  return names;
}

size_t defaultClassIndex(const FlowConfig& config) {
  const std::vector<ClassSpec> classes = classesOf(config);
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].name == config.default_class) return i;
  }
  return classes.size() - 1;
}

std::string validateFlowConfig(const FlowConfig& config) {
  const std::vector<ClassSpec> classes = classesOf(config);
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].name.empty()) return fmt::format("flow_control.classes[{}].name: must not be empty", i);
    if (classes[i].max_wait_ms == 0) {
      return fmt::format("flow_control.classes[{}].max_wait_ms: 0 would shed every queued request", i);
    }
    for (size_t j = 0; j < i; ++j) {
      if (classes[j].name == classes[i].name) {
        return fmt::format("flow_control.classes[{}].name: '{}' is already class {}", i, classes[i].name, j);
      }
    }
  }
  if (!config.default_class.empty() && defaultClassIndex(config) == classes.size() - 1 &&
      classes.back().name != config.default_class) {
    return fmt::format("flow_control.default_class: '{}' is not one of the classes", config.default_class);
  }
  if (config.min_ttft_slo_ms > config.max_ttft_slo_ms) {
    return fmt::format("flow_control.min_ttft_slo_ms: {} is above max_ttft_slo_ms ({})", config.min_ttft_slo_ms,
                       config.max_ttft_slo_ms);
  }
  if (config.tenant_header.empty()) return "flow_control.tenant_header: must not be empty";
  if (!(config.max_tenant_share > 0 && config.max_tenant_share <= 1)) {
    return fmt::format("flow_control.max_tenant_share: {} must be in (0, 1] (1 = no limit)", config.max_tenant_share);
  }
  if (config.max_queued_total == 0 || config.max_queued_per_tenant == 0 || config.max_queued_bytes_total == 0 ||
      config.max_queued_bytes_per_tenant == 0) {
    return "flow_control.max_queued_*: each bound must be at least 1 (disable flow control with enabled: false)";
  }
  if (!(config.input_token_weight >= 0) || !(config.output_token_weight >= 0)) {
    return fmt::format("flow_control.input_token_weight/output_token_weight: {} and {} must both be >= 0",
                       config.input_token_weight, config.output_token_weight);
  }
  return {};
}

int64_t queueDeadlineMs(const FlowConfig& config, size_t class_index, int64_t enqueued_ms) {
  const std::vector<ClassSpec> classes = classesOf(config);
  const size_t i = class_index < classes.size() ? class_index : classes.size() - 1;
  return enqueued_ms + static_cast<int64_t>(classes[i].max_wait_ms);
}

}  // namespace prefixgate::flow
