#pragma once
// Flow control settings (issue 27): how requests are put into flows (tenant x priority class) and how much the
// gateway may hold while its pods are saturated. Plain structs; parsing them from YAML is the config layer's job,
// checking them is validateFlowConfig(). The discipline itself is described in docs/flow-control.md.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace prefixgate::flow {

// One priority class. Classes are listed highest first: a queued request of class i always goes before every
// queued request of class i + 1 (strict priority).
struct ClassSpec {
  std::string name;
  // TTFT objective of a request of this class when neither its API key, its model nor its header gives one.
  // 0 = none.
  uint32_t ttft_slo_ms = 0;
  // Longest time a request of this class may wait in the gateway's queue before it is shed with `timeout`.
  uint32_t max_wait_ms = 30000;
};

struct FlowConfig {
  // Off: nothing is queued in the gateway (today's behaviour).
  bool enabled = false;
  // Names the tenant of a request that has no API key name (before the body's `user` field).
  std::string tenant_header = "x-tenant-id";
  // Highest first. Empty: one class named kDefaultClassName.
  std::vector<ClassSpec> classes;
  // Class of a request that names none. Empty: the last (lowest) class, so unlabelled traffic never outranks
  // labelled traffic.
  std::string default_class;
  // Any TTFT objective (key, model, header or class) is clamped to these bounds.
  uint32_t min_ttft_slo_ms = 50;
  uint32_t max_ttft_slo_ms = 600000;
  // Bounds on what is queued (not on what is in flight). A request that would exceed its tenant's bound is shed
  // with `tenant_queue_full` (429); one that would exceed a total bound with `queue_full` (503).
  size_t max_queued_total = 10000;
  size_t max_queued_per_tenant = 1000;
  size_t max_queued_bytes_total = size_t{256} << 20;
  size_t max_queued_bytes_per_tenant = size_t{32} << 20;
  // Most tenants tracked at once (not counting kOverflowTenant); requests of further tenants share the flow
  // kOverflowTenant. Bounds the memory a flood of made-up tenant names can take.
  size_t max_tenants = 10000;
  // Virtual Token Counter weights: a tenant's counter grows by prompt tokens x input weight at dispatch and by
  // output tokens x output weight as they are served (VTC, OSDI'24; the paper's defaults).
  double input_token_weight = 1;
  double output_token_weight = 2;
  // Saturation (when requests queue instead of going straight to a pod): a pod has no room when it has this many
  // requests in flight (all replicas); 0 = limits.max_in_flight_per_pod. One of the two must be set.
  uint32_t max_in_flight_per_pod = 0;
  // A pod whose engine reports this many requests waiting in its own queue has no room either; 0 = not used.
  uint32_t max_engine_waiting = 0;
  // While another tenant has requests queued or in flight, one tenant may hold at most this share of the model's
  // capacity (ready pods x the per-pod limit; at least one request) in flight; beyond it its requests wait even when
  // a pod has room, which keeps that room for the others' next requests (a flood cannot take every slot a steady
  // tenant is about to need). 1 = no limit (work-conserving). In (0, 1].
  double max_tenant_share = 1.0;
  // With max_tenant_share below 1: a tenant holding at least half its share in flight while another tenant is active
  // is routed only among the fewest pods that hold its share (its own pods, by rendezvous hash of tenant and pod
  // name), so the other tenants' requests find pods it does not crowd: their prefills do not share engine steps
  // with its. Off: every tenant's requests go to any pod.
  bool confine_heavy_tenants = true;
};

inline constexpr std::string_view kDefaultClassName = "default";
// The flow shared by requests of tenants beyond max_tenants.
inline constexpr std::string_view kOverflowTenant = "_other";
// The flow of requests that name no tenant at all (no key, no tenant header, no `user`).
inline constexpr std::string_view kDefaultTenant = "_default";

// The classes in force: config.classes, or one class named kDefaultClassName when that is empty.
std::vector<ClassSpec> classesOf(const FlowConfig& config);
// The names of classesOf(config), highest first.
std::vector<std::string> classNames(const FlowConfig& config);
// Index in classesOf(config) of the class a request naming none gets (see FlowConfig::default_class).
// An unknown default_class (which validateFlowConfig rejects) gives the last class.
size_t defaultClassIndex(const FlowConfig& config);
// Empty when the config is usable, else one message naming the field, its value and the reason.
std::string validateFlowConfig(const FlowConfig& config);
// When a request of class `class_index` enqueued at `enqueued_ms` is shed with `timeout`.
int64_t queueDeadlineMs(const FlowConfig& config, size_t class_index, int64_t enqueued_ms);

}  // namespace prefixgate::flow
