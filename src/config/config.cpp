#include "config/config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/yaml_reader.h"
#include "net/listener.h"
#include "util/log.h"

namespace prefixgate::config {
namespace {

void readPrefixCache(YamlReader r, PrefixCacheConfig& c) {
  r.read("tokenizer", c.tokenizer);
  r.read("block_size", c.block_size);
  r.read("block_number", c.block_number);
  r.read("eviction_duration_mins", c.eviction_duration_mins);
  r.read("standard_deviation_factor", c.standard_deviation_factor);
  r.read("include_tools", c.include_tools);
  r.read("use_remote_tokenizer", c.use_remote_tokenizer);
  r.read("kv_event_sync", c.kv_event_sync);
  r.read("remote_tokenizer_timeout_ms", c.remote_tokenizer_timeout_ms);
  r.read("remote_tokenizer_cache_entries", c.remote_tokenizer_cache_entries);
  r.read("remote_tokenizer_cache_mb", c.remote_tokenizer_cache_mb);
  r.read("remote_tokenizer_max_cached_tokens", c.remote_tokenizer_max_cached_tokens);
  r.read("remote_tokenizer_hedge_delay_ms", c.remote_tokenizer_hedge_delay_ms);
  r.read("remote_tokenizer_breaker_backoff_ms", c.remote_tokenizer_breaker_backoff_ms);
  r.read("remote_tokenizer_breaker_max_backoff_ms", c.remote_tokenizer_breaker_max_backoff_ms);
  r.read("hash_seed", c.hash_seed);
  r.read("capacity_aware", c.capacity_aware);
  r.read("slot_wait_ms", c.slot_wait_ms);
  r.read("speculative_ttl_ms", c.speculative_ttl_ms);
  r.read("silent_publisher_ms", c.silent_publisher_ms);
  r.read("cpu_block_credit", c.cpu_block_credit);
  r.read("kv_event_max_pod_blocks", c.kv_event_max_pod_blocks);
  r.read("kv_event_max_pod_adapters", c.kv_event_max_pod_adapters);
  r.read("kv_event_max_adapter_name_bytes", c.kv_event_max_adapter_name_bytes);
  r.retired("kv_event_replay_hold_mb",
            "fixed at " + std::to_string(PrefixCacheConfig::kKvEventReplayHoldMb) + " MiB per publisher");
  r.retired("kv_event_poll_round_kb",
            "fixed at " + std::to_string(PrefixCacheConfig::kKvEventPollRoundKb) + " KiB per publisher and round");
  r.read("tiktoken_file", c.tiktoken_file);
  r.read("tokenizer_cache_mb", c.tokenizer_cache_mb);
  r.read("scorer", c.scorer);
  r.finish();
}

void readRouting(YamlReader r, RoutingConfig& c) {
  r.read("strategy", c.strategy);
  r.read("load_only_strategy", c.load_only_strategy);
  r.read("max_scored_pods", c.max_scored_pods);
  r.read("sampled_pods", c.sampled_pods);
  readPrefixCache(r.child("prefix_cache"), c.prefix_cache);
  YamlReader blend = r.child("blend");
  blend.read("prefix_cache_weight", c.blend.prefix_cache_weight);
  blend.read("prefix_cache_load_balance_weight", c.blend.prefix_cache_load_balance_weight);
  blend.read("load_balance_weight", c.blend.load_balance_weight);
  blend.read("prefill_cost_weight", c.blend.prefill_cost_weight);
  blend.finish();
  YamlReader lb = r.child("load_balance");
  lb.read("lambda", c.load_balance.lambda);
  lb.read("alpha", c.load_balance.alpha);
  lb.read("kv_critical", c.load_balance.kv_critical);
  lb.finish();
  YamlReader strategies = r.child("strategies");
  for (const std::string& name : strategies.keys()) c.strategy_settings[name] = strategies.rawYaml(name);
  strategies.finish();
  YamlReader gate = r.child("load_imbalance");
  gate.read("min_gap", c.load_imbalance.min_gap);
  gate.read("factor", c.load_imbalance.factor);
  gate.finish();
  YamlReader affinity = r.child("response_affinity");
  affinity.read("max_entries", c.response_affinity.max_entries);
  affinity.read("ttl_ms", c.response_affinity.ttl_ms);
  affinity.finish();
  r.finish();
}

// routing_config: {prefix_cache: {standard_deviation_factor: N}, load_balance: {lambda, alpha, kv_critical}}
// inside a model or a profile.
void readRoutingOverrides(YamlReader r, std::optional<double>& factor, LoadBalanceOverrides& load_balance) {
  YamlReader pc = r.child("prefix_cache");
  pc.read("standard_deviation_factor", factor);
  pc.finish();
  YamlReader lb = r.child("load_balance");
  lb.read("lambda", load_balance.lambda);
  lb.read("alpha", load_balance.alpha);
  lb.read("kv_critical", load_balance.kv_critical);
  lb.finish();
  r.finish();
}

void readModels(YamlReader r, std::map<std::string, ModelConfig>& models) {
  for (const std::string& name : r.keys()) {
    YamlReader m = r.child(name);
    ModelConfig& mc = models[name];
    m.read("routing_strategy", mc.routing_strategy);
    m.read("locked_routing_strategy", mc.locked_routing_strategy);
    readRoutingOverrides(m.child("routing_config"), mc.standard_deviation_factor, mc.load_balance);
    m.read("ttft_slo_ms", mc.ttft_slo_ms);
    YamlReader profiles = m.child("profiles");
    for (const std::string& pname : profiles.keys()) {
      YamlReader p = profiles.child(pname);
      ModelProfile& profile = mc.profiles[pname];
      p.read("routing_strategy", profile.routing_strategy);
      readRoutingOverrides(p.child("routing_config"), profile.standard_deviation_factor, profile.load_balance);
      p.finish();
    }
    m.finish();
  }
}

void readDiscovery(YamlReader r, DiscoveryConfig& c) {
  r.read("file", c.file);
  r.read("file_poll_interval_ms", c.file_poll_interval_ms);
  if (r.has("kubernetes")) {
    YamlReader k = r.child("kubernetes");
    KubernetesConfig kc;
    k.read("api_server", kc.api_server);
    k.read("token_file", kc.token_file);
    k.read("ca_file", kc.ca_file);
    k.read("namespaces", kc.namespaces);
    k.read("label_selector", kc.label_selector);
    k.read("model_label", kc.model_label);
    k.read("engine_label", kc.engine_label);
    k.read("role_label", kc.role_label);
    k.read("port_name", kc.port_name);
    k.read("kv_events_port", kc.kv_events_port);
    k.read("kv_replay_port", kc.kv_replay_port);
    k.finish();
    c.kubernetes = kc;
  }
  r.finish();
}

void readDisaggregation(YamlReader r, DisaggregationConfig& c) {
  std::string mode = c.mode == DisaggregationConfig::Mode::kSidecar ? "sidecar" : "connector";
  r.read("mode", mode);
  if (mode == "connector") c.mode = DisaggregationConfig::Mode::kConnector;
  else if (mode == "sidecar") c.mode = DisaggregationConfig::Mode::kSidecar;
  else r.problem("mode", "expected connector or sidecar, got '" + mode + "'");
  r.read("decode_strategy", c.decode_strategy);
  r.read("aggregate_below_tokens", c.aggregate_below_tokens);
  r.read("max_prefill_in_flight", c.max_prefill_in_flight);
  r.read("pass_client_kv_transfer_params", c.pass_client_kv_transfer_params);
  r.finish();
}

void readFlowControl(YamlReader r, flow::FlowConfig& c) {
  r.read("enabled", c.enabled);
  r.read("tenant_header", c.tenant_header);
  r.read("default_class", c.default_class);
  r.read("min_ttft_slo_ms", c.min_ttft_slo_ms);
  r.read("max_ttft_slo_ms", c.max_ttft_slo_ms);
  r.read("max_queued_total", c.max_queued_total);
  r.read("max_queued_per_tenant", c.max_queued_per_tenant);
  r.read("max_queued_bytes_total", c.max_queued_bytes_total);
  r.read("max_queued_bytes_per_tenant", c.max_queued_bytes_per_tenant);
  r.read("max_tenants", c.max_tenants);
  r.read("input_token_weight", c.input_token_weight);
  r.read("output_token_weight", c.output_token_weight);
  r.read("max_in_flight_per_pod", c.max_in_flight_per_pod);
  r.read("max_engine_waiting", c.max_engine_waiting);
  r.read("max_tenant_share", c.max_tenant_share);
  r.read("confine_heavy_tenants", c.confine_heavy_tenants);
  if (std::vector<YamlReader> items = r.children("classes"); !items.empty()) {
    c.classes.clear();
    for (YamlReader& item : items) {
      flow::ClassSpec spec;
      item.read("name", spec.name);
      item.read("ttft_slo_ms", spec.ttft_slo_ms);
      item.read("max_wait_ms", spec.max_wait_ms);
      item.finish();
      c.classes.push_back(std::move(spec));
    }
  }
  r.finish();
}

}  // namespace

Config parseYaml(const std::string& text, const std::string& source, Problems& problems) {
  Config c;
  c.source = source;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    problems.push_back(source + ": line " + std::to_string(e.mark.line + 1) + ": invalid YAML: " + e.msg);
    return c;
  }
  YamlReader r(root, source, "", problems);
  r.read("listen", c.listen);
  r.read("admin_listen", c.admin_listen);
  r.read("health_listen", c.health_listen);
  r.read("threads", c.threads);
  r.read("scheduler_slice_us", c.scheduler_slice_us);
  r.read("log_level", c.log_level);
  r.read("log_format", c.log_format);
  r.read("shutdown_grace_ms", c.shutdown_grace_ms);
  readDiscovery(r.child("discovery"), c.discovery);
  readRouting(r.child("routing"), c.routing);
  YamlReader em = r.child("engine_metrics");
  em.read("scrape_interval_ms", c.engine_metrics.scrape_interval_ms);
  em.read("scrape_timeout_ms", c.engine_metrics.scrape_timeout_ms);
  em.finish();
  readModels(r.child("models"), c.models);
  YamlReader ss = r.child("state_sync");
  ss.read("enabled", c.state_sync.enabled);
  ss.read("redis", c.state_sync.redis);
  ss.read("key_prefix", c.state_sync.key_prefix);
  ss.read("replica_id", c.state_sync.replica_id);
  ss.read("flush_interval_ms", c.state_sync.flush_interval_ms);
  ss.read("load_interval_ms", c.state_sync.load_interval_ms);
  ss.read("replica_ttl_ms", c.state_sync.replica_ttl_ms);
  ss.read("snapshot_interval_ms", c.state_sync.snapshot_interval_ms);
  ss.read("snapshot_max_records", c.state_sync.snapshot_max_records);
  ss.retired("stream_max_entries", "fixed at " + std::to_string(StateSyncConfig::kStreamMaxEntries) + " entries");
  ss.read("max_blocks_per_record", c.state_sync.max_blocks_per_record);
  ss.read("max_send_bytes_per_second", c.state_sync.max_send_bytes_per_second);
  ss.read("max_pending_bytes", c.state_sync.max_pending_bytes);
  ss.read("timeout_ms", c.state_sync.timeout_ms);
  ss.read("reconnect_max_ms", c.state_sync.reconnect_max_ms);
  ss.finish();
  YamlReader up = r.child("upstream");
  up.read("connect_timeout_ms", c.upstream.connect_timeout_ms);
  up.read("response_header_timeout_ms", c.upstream.response_header_timeout_ms);
  up.read("idle_timeout_ms", c.upstream.idle_timeout_ms);
  up.read("pool_idle_ms", c.upstream.pool_idle_ms);
  up.read("max_retries", c.upstream.max_retries);
  up.read("max_response_bytes", c.upstream.max_response_bytes);
  up.finish();
  YamlReader hc = r.child("health_check");
  hc.read("interval_ms", c.health_check.interval_ms);
  hc.read("timeout_ms", c.health_check.timeout_ms);
  hc.read("unhealthy_threshold", c.health_check.unhealthy_threshold);
  hc.read("healthy_threshold", c.health_check.healthy_threshold);
  hc.read("passive_failure_threshold", c.health_check.passive_failure_threshold);
  hc.read("distinct_request_failures", c.health_check.distinct_request_failures);
  hc.read("max_ejection_percent", c.health_check.max_ejection_percent);
  hc.read("panic_threshold_percent", c.health_check.panic_threshold_percent);
  hc.read("eject_base_ms", c.health_check.eject_base_ms);
  hc.read("eject_max_ms", c.health_check.eject_max_ms);
  hc.finish();
  YamlReader lim = r.child("limits");
  lim.read("max_body_bytes", c.limits.max_body_bytes);
  lim.read("max_header_bytes", c.limits.max_header_bytes);
  lim.read("max_in_flight", c.limits.max_in_flight);
  lim.read("max_in_flight_per_pod", c.limits.max_in_flight_per_pod);
  lim.read("header_timeout_ms", c.limits.header_timeout_ms);
  lim.read("client_idle_timeout_ms", c.limits.client_idle_timeout_ms);
  lim.read("max_connections", c.limits.max_connections);
  lim.read("admin_max_body_bytes", c.limits.admin_max_body_bytes);
  lim.read("max_buffered_body_bytes", c.limits.max_buffered_body_bytes);
  lim.read("max_json_depth", c.limits.max_json_depth);
  lim.finish();
  YamlReader auth = r.child("auth");
  auth.read("api_keys_file", c.auth.api_keys_file);
  auth.read("admin_token_file", c.auth.admin_token_file);
  auth.read("forward_authorization", c.auth.forward_authorization);
  auth.read("file_poll_interval_ms", c.auth.file_poll_interval_ms);
  auth.finish();
  readDisaggregation(r.child("disaggregation"), c.disaggregation);
  readFlowControl(r.child("flow_control"), c.flow_control);
  YamlReader tr = r.child("tracing");
  tr.read("otlp_endpoint", c.tracing.otlp_endpoint);
  tr.read("sample_ratio", c.tracing.sample_ratio);
  tr.read("service_name", c.tracing.service_name);
  tr.read("max_queued_spans", c.tracing.max_queued_spans);
  tr.read("max_batch_spans", c.tracing.max_batch_spans);
  tr.read("export_delay_ms", c.tracing.export_delay_ms);
  tr.read("export_timeout_ms", c.tracing.export_timeout_ms);
  tr.finish();
  r.read("random_seed", c.random_seed);
  r.finish();

  // Relative paths resolve against the folder of the file that names them.
  for (std::string* file : {&c.discovery.file, &c.auth.api_keys_file, &c.auth.admin_token_file}) {
    if (file->empty() || source.empty()) continue;
    std::filesystem::path p(*file);
    if (p.is_relative()) *file = (std::filesystem::path(source).parent_path() / p).lexically_normal().string();
  }
  return c;
}

std::map<std::string, std::string> knownKeys() {
  // Sets nothing but the sections that are read only when present (and one model with one profile), so every key is
  // read at its default.
  static constexpr const char* kProbe =
      "discovery: {kubernetes: {}}\n"
      "models: {'<model>': {profiles: {'<profile>': {}}}}\n";
  KeyLog log;
  Problems ignored;
  parseYaml(kProbe, "", ignored);
  return log.keys();
}

Config loadFile(const std::string& path, Problems& problems) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problems.push_back(path + ": cannot read the file");
    Config c;
    c.source = path;
    return c;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string source = std::filesystem::absolute(path).lexically_normal().string();
  return parseYaml(ss.str(), source, problems);
}

}  // namespace prefixgate::config
