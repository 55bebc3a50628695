// Range and cross-field checks, after the file, the environment and the flags have all been applied.
#include <algorithm>

#include "config/config.h"
#include "discovery/kubernetes/watch_protocol.h"
#include "index/block_store.h"
#include "index/prefix_index.h"
#include "net/listener.h"
#include "sync/redis_address.h"
#include "tokenize/token_bytes.h"
#include "trace/otlp_endpoint.h"
#include "util/log.h"

namespace prefixgate::config {
namespace {

constexpr uint32_t kMaxJsonDepthBound = 1000;

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

class Checker {
 public:
  Checker(const Config& c, Problems& problems) : source_(c.source.empty() ? "(defaults)" : c.source), problems_(problems) {}
  void fail(const std::string& key, const std::string& what) { problems_.push_back(source_ + ": " + key + ": " + what); }
  void positive(const std::string& key, uint64_t v) {
    if (v == 0) fail(key, "must be greater than 0");
  }
  void atMost(const std::string& key, uint64_t v, uint64_t max, const std::string& why = "") {
    if (v > max) fail(key, "must be at most " + std::to_string(max) + (why.empty() ? "" : " (" + why + ")"));
  }
  void nonNegative(const std::string& key, double v) {
    if (v < 0) fail(key, "must not be negative");
  }
  void strategy(const std::string& key, const std::string& name, const std::vector<std::string>& known) {
    if (name.empty() || std::find(known.begin(), known.end(), name) != known.end()) return;
    fail(key, "unknown strategy '" + name + "' (valid: " + joinNames(known) + ")");
  }

 private:
  std::string source_;
  Problems& problems_;
};

void validateStateSync(const StateSyncConfig& s, Checker& check) {
  sync::RedisAddress address;
  std::string error;
  if (!sync::parseRedisUrl(s.redis, address, error)) check.fail("state_sync.redis", error);
  if (s.key_prefix.empty() || s.key_prefix.size() > 64)
    check.fail("state_sync.key_prefix", "must be 1 to 64 characters");
  if (s.replica_id.size() > 128) check.fail("state_sync.replica_id", "must be at most 128 characters");
  for (char ch : s.key_prefix + s.replica_id)
    if (static_cast<unsigned char>(ch) <= ' ' || ch == 0x7f) {
      check.fail("state_sync.key_prefix / replica_id", "must not contain spaces or control characters");
      break;
    }
  check.positive("state_sync.flush_interval_ms", s.flush_interval_ms);
  check.atMost("state_sync.flush_interval_ms", s.flush_interval_ms, 1000, "records must reach the others within a second");
  check.positive("state_sync.load_interval_ms", s.load_interval_ms);
  check.positive("state_sync.snapshot_interval_ms", s.snapshot_interval_ms);
  check.positive("state_sync.snapshot_max_records", s.snapshot_max_records);
  check.positive("state_sync.max_blocks_per_record", s.max_blocks_per_record);
  check.atMost("state_sync.max_blocks_per_record", s.max_blocks_per_record, 65536);
  check.positive("state_sync.max_send_bytes_per_second", s.max_send_bytes_per_second);
  check.positive("state_sync.max_pending_bytes", s.max_pending_bytes);
  check.positive("state_sync.timeout_ms", s.timeout_ms);
  check.positive("state_sync.reconnect_max_ms", s.reconnect_max_ms);
  if (s.replica_ttl_ms <= s.load_interval_ms)
    check.fail("state_sync.replica_ttl_ms", "must be longer than state_sync.load_interval_ms (" +
                                                std::to_string(s.load_interval_ms) +
                                                "), or a live replica's counts would expire between heartbeats");
  check.atMost("state_sync.replica_ttl_ms", s.replica_ttl_ms, 60000);
}

void validateKubernetes(const KubernetesConfig& k, Checker& check) {
  const std::string key = "discovery.kubernetes.";
  discovery::kubernetes::ApiServer server;
  std::string error;
  if (!k.api_server.empty() && !discovery::kubernetes::parseApiServer(k.api_server, server, error))
    check.fail(key + "api_server", error);
  if (k.namespaces.empty()) check.fail(key + "namespaces", "must list at least one namespace");
  for (const auto& ns : k.namespaces)
    if (ns.empty()) check.fail(key + "namespaces", "a namespace name must not be empty");
  if (k.model_label.empty()) check.fail(key + "model_label", "must name the slice label whose value is the model");
  if ((k.api_server.empty() || server.tls) && k.ca_file.empty())
    check.fail(key + "ca_file", "required for https (it verifies the API server)");
  check.atMost(key + "kv_events_port", k.kv_events_port, 65535, "a TCP port");
  check.atMost(key + "kv_replay_port", k.kv_replay_port, 65535, "a TCP port");
}

// Checked whether or not tracing is on, so a bad value is found before someone turns it on.
void validateTracing(const TracingConfig& t, Checker& check) {
  if (!t.otlp_endpoint.empty()) {
    trace::OtlpEndpoint endpoint;
    std::string error;
    if (!trace::parseOtlpEndpoint(t.otlp_endpoint, endpoint, error)) check.fail("tracing.otlp_endpoint", error);
  }
  if (!(t.sample_ratio >= 0 && t.sample_ratio <= 1)) check.fail("tracing.sample_ratio", "must be in [0, 1]");
  if (t.service_name.empty()) check.fail("tracing.service_name", "must not be empty");
  check.positive("tracing.max_queued_spans", t.max_queued_spans);
  check.atMost("tracing.max_queued_spans", t.max_queued_spans, 1'000'000);
  check.positive("tracing.max_batch_spans", t.max_batch_spans);
  if (t.max_batch_spans > t.max_queued_spans)
    check.fail("tracing.max_batch_spans", "must be at most tracing.max_queued_spans (" +
                                              std::to_string(t.max_queued_spans) + ")");
  check.positive("tracing.export_delay_ms", t.export_delay_ms);
  check.positive("tracing.export_timeout_ms", t.export_timeout_ms);
}

}  // namespace

void validate(const Config& c, const std::vector<std::string>& known, Problems& problems) {
  Checker check(c, problems);
  std::string host;
  uint16_t port = 0;
  boost::asio::ip::address address;
  for (const auto& [key, value] : {std::pair{"listen", &c.listen}, std::pair{"admin_listen", &c.admin_listen},
                                   std::pair{"health_listen", &c.health_listen}}) {
    if (value->empty() && std::string_view(key) == "health_listen") continue;  // empty: no health listener
    if (!net::splitHostPort(*value, host, port)) check.fail(key, "expected HOST:PORT, got '" + *value + "'");
    else if (!net::listenAddress(host, address))
      check.fail(key, "the host must be an IP address (or localhost), got '" + host + "'");
  }
  if (c.threads > 1024) check.fail("threads", "at most 1024");
  // The kernel's own bounds for a custom slice (0.1 to 100 ms); it would clamp a value outside them silently.
  if (c.scheduler_slice_us != 0 && (c.scheduler_slice_us < 100 || c.scheduler_slice_us > 100000))
    check.fail("scheduler_slice_us", "must be 0 (the kernel's default) or from 100 to 100000, got " +
                                         std::to_string(c.scheduler_slice_us));
  log::Level level;
  if (!log::parseLevel(c.log_level, level)) check.fail("log_level", "expected debug, info, warn, error or off");
  log::Format format;
  if (!log::parseFormat(c.log_format, format))
    check.fail("log_format", "expected text or json, got '" + c.log_format + "'");

  if (c.discovery.file.empty() && !c.discovery.kubernetes)
    check.fail("discovery", "set discovery.file (a pods file) or discovery.kubernetes");
  if (!c.discovery.file.empty() && c.discovery.kubernetes)
    check.fail("discovery", "set only one of discovery.file and discovery.kubernetes");
  else if (c.discovery.kubernetes)
    validateKubernetes(*c.discovery.kubernetes, check);
  check.positive("discovery.file_poll_interval_ms", c.discovery.file_poll_interval_ms);

  const auto& r = c.routing;
  if (r.strategy.empty()) check.fail("routing.strategy", "must not be empty");
  check.strategy("routing.strategy", r.strategy, known);
  if (r.prefix_cache.scorer != "wait" && r.prefix_cache.scorer != "blend")
    check.fail("routing.prefix_cache.scorer", "expected wait or blend, got '" + r.prefix_cache.scorer + "'");
  if (r.prefix_cache.tokenizer != "character" && r.prefix_cache.tokenizer != "tiktoken")
    check.fail("routing.prefix_cache.tokenizer", "expected character or tiktoken, got '" + r.prefix_cache.tokenizer + "'");
  check.positive("routing.prefix_cache.block_size", r.prefix_cache.block_size);
  if (r.prefix_cache.tokenizer == "tiktoken" && r.prefix_cache.block_size % tokenize::kTokenIdBytes != 0)
    check.fail("routing.prefix_cache.block_size",
               fmt::format("must be a multiple of {0} with the tiktoken tokenizer ({0} bytes per token)",
                           tokenize::kTokenIdBytes));
  else if (r.prefix_cache.remoteTokenizerOn() && r.prefix_cache.block_size % tokenize::kTokenIdBytes != 0)
    check.fail("routing.prefix_cache.block_size",
               fmt::format("must be a multiple of {0} with the remote tokenizer (use_remote_tokenizer or "
                           "kv_event_sync: {0} bytes per token)",
                           tokenize::kTokenIdBytes));
  check.positive("routing.prefix_cache.block_number", r.prefix_cache.block_number);
  check.atMost("routing.prefix_cache.block_number", r.prefix_cache.block_number,
               index::PrefixIndex::kMaxShards * uint64_t{index::BlockStore::kMaxBlocks}, "the index's largest size");
  check.positive("routing.prefix_cache.remote_tokenizer_timeout_ms", r.prefix_cache.remote_tokenizer_timeout_ms);
  check.positive("routing.prefix_cache.remote_tokenizer_cache_entries", r.prefix_cache.remote_tokenizer_cache_entries);
  // The cache reserves its table at start: a number beyond memory would fail there instead of here.
  check.atMost("routing.prefix_cache.remote_tokenizer_cache_entries", r.prefix_cache.remote_tokenizer_cache_entries,
               10'000'000);
  check.atMost("routing.prefix_cache.tokenizer_cache_mb", r.prefix_cache.tokenizer_cache_mb, 65536);
  check.atMost("routing.prefix_cache.remote_tokenizer_cache_mb", r.prefix_cache.remote_tokenizer_cache_mb, 65536);
  check.positive("routing.prefix_cache.remote_tokenizer_max_cached_tokens",
                 r.prefix_cache.remote_tokenizer_max_cached_tokens);
  check.positive("routing.prefix_cache.remote_tokenizer_breaker_backoff_ms",
                 r.prefix_cache.remote_tokenizer_breaker_backoff_ms);
  if (r.prefix_cache.remote_tokenizer_breaker_max_backoff_ms < r.prefix_cache.remote_tokenizer_breaker_backoff_ms)
    check.fail("routing.prefix_cache.remote_tokenizer_breaker_max_backoff_ms",
               "must be at least remote_tokenizer_breaker_backoff_ms");
  check.atMost("routing.prefix_cache.slot_wait_ms", r.prefix_cache.slot_wait_ms, 600'000);
  // Modes later releases add: refuse them rather than silently run without them.
  check.positive("routing.prefix_cache.silent_publisher_ms", r.prefix_cache.silent_publisher_ms);
  if (!(r.prefix_cache.cpu_block_credit >= 0 && r.prefix_cache.cpu_block_credit <= 1))
    check.fail("routing.prefix_cache.cpu_block_credit", "must be in [0, 1]");
  check.positive("routing.prefix_cache.kv_event_max_pod_blocks", r.prefix_cache.kv_event_max_pod_blocks);
  check.positive("routing.prefix_cache.kv_event_max_adapter_name_bytes", r.prefix_cache.kv_event_max_adapter_name_bytes);
  validateStateSync(c.state_sync, check);
  check.positive("routing.prefix_cache.eviction_duration_mins", r.prefix_cache.eviction_duration_mins);
  check.atMost("routing.prefix_cache.eviction_duration_mins", r.prefix_cache.eviction_duration_mins,
               std::chrono::duration_cast<std::chrono::minutes>(index::PrefixIndex::kMaxExpiry).count(),
               "about 248 days, the index's longest expiry");
  check.nonNegative("routing.blend.prefix_cache_weight", r.blend.prefix_cache_weight);
  check.nonNegative("routing.blend.prefix_cache_load_balance_weight", r.blend.prefix_cache_load_balance_weight);
  check.nonNegative("routing.blend.load_balance_weight", r.blend.load_balance_weight);
  check.nonNegative("routing.blend.prefill_cost_weight", r.blend.prefill_cost_weight);
  if (r.blend.prefix_cache_weight + r.blend.prefix_cache_load_balance_weight <= 0)
    check.fail("routing.blend", "prefix_cache_weight and prefix_cache_load_balance_weight must not both be 0");
  check.nonNegative("routing.load_balance.lambda", r.load_balance.lambda);
  check.nonNegative("routing.load_balance.alpha", r.load_balance.alpha);
  if (r.load_balance.kv_critical < 0 || r.load_balance.kv_critical >= 1)
    check.fail("routing.load_balance.kv_critical", "must be in [0, 1)");
  if (r.load_imbalance.factor < 1) check.fail("routing.load_imbalance.factor", "must be at least 1");
  if (r.response_affinity.ttl_ms == 0) check.fail("routing.response_affinity.ttl_ms", "must be at least 1");
  // Sampled decisions: a sample no smaller than the threshold would score as many pods as a whole small fleet.
  check.atMost("routing.max_scored_pods", r.max_scored_pods, 1000000);
  check.positive("routing.sampled_pods", r.sampled_pods);
  if (r.max_scored_pods > 0)
    check.atMost("routing.sampled_pods", r.sampled_pods, r.max_scored_pods, "routing.max_scored_pods");

  // A model's or profile's routing_config.load_balance: the same ranges as routing.load_balance.
  auto checkLoadBalance = [&check](const std::string& key, const LoadBalanceOverrides& lb) {
    if (lb.lambda) check.nonNegative(key + ".lambda", *lb.lambda);
    if (lb.alpha) check.nonNegative(key + ".alpha", *lb.alpha);
    if (lb.kv_critical && (*lb.kv_critical < 0 || *lb.kv_critical >= 1))
      check.fail(key + ".kv_critical", "must be in [0, 1)");
  };
  for (const auto& [model, mc] : c.models) {
    std::string base = "models." + model;
    check.strategy(base + ".routing_strategy", mc.routing_strategy, known);
    check.strategy(base + ".locked_routing_strategy", mc.locked_routing_strategy, known);
    checkLoadBalance(base + ".routing_config.load_balance", mc.load_balance);
    for (const auto& [pname, profile] : mc.profiles) {
      check.strategy(base + ".profiles." + pname + ".routing_strategy", profile.routing_strategy, known);
      checkLoadBalance(base + ".profiles." + pname + ".routing_config.load_balance", profile.load_balance);
    }
  }

  check.positive("engine_metrics.scrape_interval_ms", c.engine_metrics.scrape_interval_ms);
  check.positive("engine_metrics.scrape_timeout_ms", c.engine_metrics.scrape_timeout_ms);
  check.positive("upstream.connect_timeout_ms", c.upstream.connect_timeout_ms);
  check.positive("upstream.response_header_timeout_ms", c.upstream.response_header_timeout_ms);
  check.positive("upstream.idle_timeout_ms", c.upstream.idle_timeout_ms);
  check.positive("upstream.pool_idle_ms", c.upstream.pool_idle_ms);
  if (c.upstream.max_retries > 5) check.fail("upstream.max_retries", "at most 5");
  check.positive("health_check.interval_ms", c.health_check.interval_ms);
  check.positive("health_check.timeout_ms", c.health_check.timeout_ms);
  check.positive("health_check.unhealthy_threshold", c.health_check.unhealthy_threshold);
  check.positive("health_check.healthy_threshold", c.health_check.healthy_threshold);
  check.positive("health_check.passive_failure_threshold", c.health_check.passive_failure_threshold);
  check.positive("health_check.distinct_request_failures", c.health_check.distinct_request_failures);
  check.positive("health_check.eject_base_ms", c.health_check.eject_base_ms);
  if (c.health_check.max_ejection_percent > 100) check.fail("health_check.max_ejection_percent", "must be in [0, 100]");
  if (c.health_check.panic_threshold_percent > 100)
    check.fail("health_check.panic_threshold_percent", "must be in [0, 100]");
  if (c.health_check.eject_max_ms < c.health_check.eject_base_ms)
    check.fail("health_check.eject_max_ms", "must be at least health_check.eject_base_ms");
  check.positive("limits.max_body_bytes", c.limits.max_body_bytes);
  // A request body is held in memory whole (it is parsed, then forwarded): 1 GiB bounds what one client can pin.
  check.atMost("limits.max_body_bytes", c.limits.max_body_bytes, uint64_t{1} << 30, "1 GiB");
  if (c.limits.max_header_bytes < 1024) check.fail("limits.max_header_bytes", "must be at least 1024");
  check.atMost("limits.max_header_bytes", c.limits.max_header_bytes, 1u << 20, "1 MiB");
  check.positive("limits.header_timeout_ms", c.limits.header_timeout_ms);
  check.positive("limits.client_idle_timeout_ms", c.limits.client_idle_timeout_ms);
  check.positive("limits.max_connections", c.limits.max_connections);
  // Two descriptors per connection (client and engine) must fit the process's file limit (raised at start).
  check.atMost("limits.max_connections", c.limits.max_connections, 1'000'000);
  check.positive("limits.admin_max_body_bytes", c.limits.admin_max_body_bytes);
  // Below one largest body, a body the limits allow could never be read.
  if (c.limits.max_buffered_body_bytes < c.limits.max_body_bytes)
    check.fail("limits.max_buffered_body_bytes", "must be at least limits.max_body_bytes (" +
                                                     std::to_string(c.limits.max_body_bytes) + ")");
  check.positive("auth.file_poll_interval_ms", c.auth.file_poll_interval_ms);
  if (c.flow_control.enabled) {
    // validateFlowConfig names its own key (flow_control.<key>).
    if (std::string error = flow::validateFlowConfig(c.flow_control); !error.empty())
      problems.push_back((c.source.empty() ? "(defaults)" : c.source) + ": " + error);
    if (c.flow_control.max_in_flight_per_pod == 0 && c.limits.max_in_flight_per_pod == 0)
      check.fail("flow_control.max_in_flight_per_pod",
                 "flow control needs a pod's room: set it or limits.max_in_flight_per_pod");
  }
  validateTracing(c.tracing, check);
  // Above Python's default recursion limit (1000) the engines' JSON parsers fail on what the gateway lets through.
  if (c.limits.max_json_depth < 1 || c.limits.max_json_depth > kMaxJsonDepthBound)
    check.fail("limits.max_json_depth", "must be from 1 to " + std::to_string(kMaxJsonDepthBound));
}

void validateDecodeStrategy(const Config& c, const std::vector<std::string>& known,
                            const std::vector<std::string>& prompt_match_strategies, Problems& problems) {
  Checker check(c, problems);
  // Both pick a pod for a request with no prompt worth matching: by load only.
  const auto loadStrategy = [&](const std::string& key, const std::string& name, std::string_view why) {
    if (name.empty()) check.fail(key, "must not be empty");
    check.strategy(key, name, known);
    if (std::find(prompt_match_strategies.begin(), prompt_match_strategies.end(), name) == prompt_match_strategies.end())
      return;
    check.fail(key, "'" + name + "' scores by the prompt's prefix match, which " + std::string(why) +
                        ": name a load strategy, e.g. least-request");
  };
  loadStrategy("disaggregation.decode_strategy", c.disaggregation.decode_strategy,
               "the decode leg has no use for (the prefill pod computed the prompt)");
  loadStrategy("routing.load_only_strategy", c.routing.load_only_strategy,
               "rerank and score requests have none of (they are routed by load)");
}

}  // namespace prefixgate::config
