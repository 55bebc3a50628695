#pragma once
// The gateway's configuration: built-in defaults < YAML file < environment < command-line flags.
// Loading collects every problem (file, key, what is wrong) instead of stopping at the first, so `--check`
// can list them all. Pure: no sockets; the environment is read through an injected lookup.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flow/flow_config.h"
#include "prefixgate/types.h"

namespace prefixgate::config {

struct PrefixCacheConfig {
  std::string tokenizer = "character";  // character | tiktoken
  uint32_t block_size = 128;
  uint64_t block_number = 200000;
  uint32_t eviction_duration_mins = 20;
  double standard_deviation_factor = 2.0;
  bool include_tools = true;
  bool use_remote_tokenizer = false;
  bool kv_event_sync = false;
  uint32_t remote_tokenizer_timeout_ms = 500;        // the whole /tokenize call, retry included
  uint64_t remote_tokenizer_cache_entries = 10000;   // answers kept (least recently used dropped)
  uint32_t remote_tokenizer_cache_mb = 64;           // and their bytes (ids and bookkeeping); 0 = nothing cached
  // Not cached: answers longer than the model's context (max_model_len), or than this when the engine names none.
  uint32_t remote_tokenizer_max_cached_tokens = 131072;
  std::optional<uint64_t> remote_tokenizer_hedge_delay_ms;  // unset: a quarter of the timeout; 0 = never hedge
  uint32_t remote_tokenizer_breaker_backoff_ms = 1000;       // a pod whose /tokenize failed is skipped this long,
  uint32_t remote_tokenizer_breaker_max_backoff_ms = 30000;  // doubling while its probes fail, up to this
  // The engine's /tokenize gives the prompt's tokens: asked for, or forced by KV event sync (whose blocks carry
  // the engine's token ids, so requests must be hashed from the same ids).
  bool remoteTokenizerOn() const { return use_remote_tokenizer || kv_event_sync; }
  std::optional<uint64_t> hash_seed;  // unset: 0 with state sync, else from random_seed (random when that is 0)
  // Standard mode: keep per pod no more routed blocks than its KV cache holds (least recently routed dropped).
  // On by default: it predicts what engines hold much better under KV pressure (docs/benchmarks.md) and changes
  // nothing while a pod's routed blocks fit its cache; false is AIBrix's standard mode.
  bool capacity_aware = true;
  // Capacity-aware standard mode, slot engines (llama.cpp): a request whose prefix only a busy slot of a pod holds
  // may wait at the gateway for that slot (up to this long) instead of taking an idle slot that computes the prefix
  // again; the wait scorer weighs the expected wait. 0 = never wait.
  uint32_t slot_wait_ms = 2000;
  // KV event sync: a chosen pod's blocks count for it this long, until its engine's events confirm them.
  uint32_t speculative_ttl_ms = 2000;
  // KV event sync: a pod that completes requests but publishes no event for this long is treated as silent
  // (its matches come from the gateway's own records instead of its empty event view).
  uint32_t silent_publisher_ms = 10000;
  // KV event sync: a block the engine holds in CPU memory (offloaded) counts this much of a GPU block.
  double cpu_block_credit = 0.5;
  // KV event sync, per pod (each data-parallel rank): what one publisher may make the gateway hold or spend, so it
  // cannot hurt the others (docs/configuration.md, "KV event bounds").
  uint64_t kv_event_max_pod_blocks = 65536;         // blocks per tier when its engine reports no KV capacity
  uint32_t kv_event_max_pod_adapters = 64;          // LoRA adapters it holds blocks of at once
  uint32_t kv_event_max_adapter_name_bytes = 256;   // a longer adapter name is refused
  // Fixed, no longer settings (nobody needed another value; a file that sets one is refused, naming it): the live
  // messages held per publisher while a replay runs, and what one polling round reads from one publisher.
  static constexpr uint32_t kKvEventReplayHoldMb = 64;
  static constexpr uint32_t kKvEventPollRoundKb = 1024;
  std::string tiktoken_file;          // cl100k_base.json; empty = the copy fetched by scripts/setup.sh
  // How prefix-cache weighs a pod's match against its load: "wait" (the estimated time to first token from each
  // pod's learned rates; prefix-cache-wait) or "blend" (AIBrix's weighted blend, or its standalone rule when
  // blend.load_balance_weight is 0; prefix-cache-blend).
  std::string scorer = "wait";
  uint32_t tokenizer_cache_mb = 64;   // tiktoken: token ids of resent prompt segments kept; 0 = off
};

struct BlendConfig {
  double prefix_cache_weight = 5;
  double prefix_cache_load_balance_weight = 4;
  double load_balance_weight = 1;  // 0 turns the blend off (standalone prefix-cache selection)
  // prefill-cost as a third scorer in the blend (its cost normalised so the cheapest pod gets 1); 0 = off.
  double prefill_cost_weight = 0;
};

using LoadBalanceConfig = LoadBalanceSettings;  // prefixgate/types.h: strategies read it without the config

// A model's or profile's overrides of routing.load_balance (`routing_config.load_balance`); unset = inherited.
struct LoadBalanceOverrides {
  std::optional<double> lambda;
  std::optional<double> alpha;
  std::optional<double> kv_critical;
  // `base` with the set fields replaced.
  LoadBalanceConfig over(LoadBalanceConfig base) const {
    if (lambda) base.lambda = *lambda;
    if (alpha) base.alpha = *alpha;
    if (kv_critical) base.kv_critical = *kv_critical;
    return base;
  }
};

struct LoadImbalanceConfig {
  uint32_t min_gap = 8;
  double factor = 2.0;
};

// The Responses API's chain affinity (routing/response_affinity.h): response id -> the pod that produced it.
struct ResponseAffinityConfig {
  uint32_t max_entries = 100000;  // ids remembered at most (least recently used dropped first); 0 = affinity off
  uint64_t ttl_ms = 3600000;      // an id is forgotten this long after it was last produced or used
};

struct RoutingConfig {
  std::string strategy = "prefix-cache";
  // The strategy for requests with no prompt to match (rerank, score: openai::matchesPrompt) whenever theirs would
  // match prompts: a load strategy (checked at start).
  std::string load_only_strategy = "least-request";
  PrefixCacheConfig prefix_cache;
  BlendConfig blend;
  LoadBalanceConfig load_balance;
  LoadImbalanceConfig load_imbalance;
  ResponseAffinityConfig response_affinity;
  // Decisions at large fleets: above this many pods serving a model's leg, a decision scores the pods holding a
  // prefix match of the prompt (at most this many, the longest) plus sampled_pods others drawn at random, not every
  // pod (routing/pod_sample.h); 0 = every pod always.
  uint32_t max_scored_pods = 64;
  uint32_t sampled_pods = 8;
  // routing.strategies.<name>: each strategy's own settings, kept as YAML text and read by the strategy
  // (routing/strategy_registry.h), which checks them at start.
  std::map<std::string, std::string> strategy_settings;
};

// A named routing profile of a model, chosen per request by the `config-profile` header.
struct ModelProfile {
  std::string routing_strategy;
  std::optional<double> standard_deviation_factor;
  LoadBalanceOverrides load_balance;
};

struct ModelConfig {
  std::string routing_strategy;         // empty = the configured default
  std::string locked_routing_strategy;  // when set, wins over the request header
  std::optional<double> standard_deviation_factor;
  LoadBalanceOverrides load_balance;
  std::map<std::string, ModelProfile> profiles;
  // Flow control: the TTFT objective of this model's requests when their API key gives none (before the
  // x-slo-ttft-ms header and the class's); 0 = none.
  uint32_t ttft_slo_ms = 0;
};

struct KubernetesConfig {
  std::string api_server;
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::vector<std::string> namespaces{"default"};
  std::string label_selector = "model.aibrix.ai/name";
  std::string model_label = "model.aibrix.ai/name";
  // The slice label naming the pods' engine (vllm, sglang, llamacpp; AIBrix's label); absent or another value:
  // recognised from each pod's /metrics.
  std::string engine_label = "model.aibrix.ai/engine";
  // The slice label naming the pods' part in disaggregated prefill/decode (prefill, decode, both; llm-d's label and
  // names; AIBrix's is "role-name"); "" = every pod serves both legs. Absent or another value: both.
  std::string role_label = "llm-d.ai/role";
  std::string port_name;
  uint32_t kv_events_port = 0;
  uint32_t kv_replay_port = 0;
};

struct DiscoveryConfig {
  std::string file;  // absolute after loading (resolved against the config file's folder)
  std::optional<KubernetesConfig> kubernetes;
  uint32_t file_poll_interval_ms = 500;
};

struct EngineMetricsConfig {
  uint32_t scrape_interval_ms = 200;
  uint32_t scrape_timeout_ms = 1000;
};

// Replicas sharing prefix records and in-flight counts through Redis (docs/state-sync.md).
struct StateSyncConfig {
  bool enabled = false;
  std::string redis = "redis://127.0.0.1:6379";  // redis://[[user]:password@]host[:port][/db]
  std::string key_prefix = "prefixgate";         // every key this gateway writes starts with it and ':'
  std::string replica_id;                        // empty: <hostname>-<random hex>
  uint32_t flush_interval_ms = 5;                // records are batched this long before one XADD
  uint32_t load_interval_ms = 100;               // in-flight counts published and read this often
  uint32_t replica_ttl_ms = 1500;                // a replica's counts expire this long after its last heartbeat
  uint32_t snapshot_interval_ms = 500;           // the snapshot (for late joiners) is updated this often
  uint32_t snapshot_max_records = 100000;        // records kept in the snapshot (oldest dropped first)
  // Fixed, no longer a setting (as kKvEventReplayHoldMb): batches kept in the stream (approximate trim); a
  // replica further behind loads the snapshot.
  static constexpr uint32_t kStreamMaxEntries = 4096;
  uint32_t max_blocks_per_record = 512;          // a record's leading blocks shared; the rest stay local
  uint64_t max_send_bytes_per_second = 16ull << 20;  // records beyond it are not shared (counted)
  uint64_t max_pending_bytes = 8ull << 20;       // records waiting for Redis; beyond it the oldest wait is dropped
  uint32_t timeout_ms = 2000;                    // a Redis reply later than this: the connection is dropped
  uint32_t reconnect_max_ms = 2000;              // reconnects back off from 50 ms up to this
};

struct UpstreamConfig {
  uint32_t connect_timeout_ms = 2000;
  uint32_t response_header_timeout_ms = 600000;
  uint32_t idle_timeout_ms = 120000;
  uint32_t pool_idle_ms = 4000;
  uint32_t max_retries = 1;
  // Largest response body relayed (0 = none). The relay streams through a small buffer, so a large body costs no
  // memory: the limit is an operator's policy, not a safeguard, and off by default for streams and answers alike.
  uint64_t max_response_bytes = 0;
};

struct HealthCheckConfig {
  uint32_t interval_ms = 1000;
  uint32_t timeout_ms = 1000;
  uint32_t unhealthy_threshold = 2;
  uint32_t healthy_threshold = 1;
  // Passive ejection (discovery/passive_ejection.h): after this many consecutive failures only the pod can cause
  // (refused, timeouts), or failures a request may have caused (a reset before the response, a 5xx) from
  // distinct_request_failures different requests in a row, a pod gets no new requests for eject_base_ms, doubling
  // on each further ejection up to eject_max_ms.
  uint32_t passive_failure_threshold = 1;
  uint32_t distinct_request_failures = 3;
  uint32_t eject_base_ms = 1000;
  uint32_t eject_max_ms = 30000;
  // No ejection leaves more than this share of a model's pods ejected (Envoy's max_ejection_percent).
  uint32_t max_ejection_percent = 50;
  // Below this share of a model's pods ready, routing ignores passive ejections (Envoy's panic threshold); 0 = never.
  uint32_t panic_threshold_percent = 50;
};

struct LimitsConfig {
  uint64_t max_body_bytes = 33554432;
  uint32_t max_header_bytes = 16384;
  uint32_t max_in_flight = 0;
  uint32_t max_in_flight_per_pod = 0;  // 0 = unlimited; a pod at the bound takes no more; all at it: 429
  uint32_t header_timeout_ms = 10000;
  uint32_t client_idle_timeout_ms = 60000;
  uint32_t max_connections = 20000;
  uint32_t max_json_depth = 64;  // request bodies nested deeper: 400, never forwarded
  uint64_t admin_max_body_bytes = 1048576;  // admin requests (/debug/route): larger bodies get 413, unread
  // Client request bodies held at once, all connections together (1 GiB = 32 bodies of the default max_body_bytes):
  // a body whose buffer would grow beyond it gets 503 with retry-after instead of memory.
  uint64_t max_buffered_body_bytes = 1073741824;
};

// Disaggregated prefill/decode (CONTRACT.md "disaggregation:"): how a request of a model with prefill pods and
// decode pods is split (proxy/pd_protocol.h has the wire forms).
struct DisaggregationConfig {
  enum class Mode : uint8_t {
    kConnector,  // the gateway runs both legs (vLLM's NixlConnector proxy protocol)
    kSidecar,    // one request to the decode pod, the prefill pod named in x-prefiller-host-port (llm-d's sidecar)
  };
  Mode mode = Mode::kConnector;
  // The strategy that picks the decode pod, by load (never by prefix: the prefill pod computed the prompt).
  std::string decode_strategy = "least-request";
  // Prompts of fewer tokens than this, or whose uncached part is (on the best prefill pod's match), are served
  // whole by one pod (a `both` pod, else a decode pod): a short prefill costs less than the KV hand-off. 0 = every
  // request of a disaggregated model is split.
  uint32_t aggregate_below_tokens = 0;
  // When every prefill pod has at least this many requests in flight (all replicas), a request is served whole by
  // a decode pod, which prefills it itself, instead of queueing behind the prefill side (Dynamo's conditional
  // disaggregation: remote prefill only while the prefill queue is short). 0 = always split.
  uint32_t max_prefill_in_flight = 0;
  // A client's own `kv_transfer_params` is removed from its body before any pod sees it (it names hosts the
  // engine's KV connector would connect to); true passes it on to the pod of a request the gateway does not split.
  bool pass_client_kv_transfer_params = false;
  // The prefill pod's kv_transfer_params larger than this are ignored (the request then decodes aggregated).
  static constexpr size_t kMaxTransferParamsBytes = 64 * 1024;
};

// Client API keys and the admin token (CONTRACT.md "auth:"); the files are re-read when they change.
struct AuthConfig {
  std::string api_keys_file;     // "" = no client keys; absolute after loading (like discovery.file)
  std::string admin_token_file;  // "" = the admin listener takes no token
  bool forward_authorization = false;  // with API keys on: pass the client's authorization header to the engine
  uint32_t file_poll_interval_ms = 500;
};

// OpenTelemetry tracing (CONTRACT.md "tracing:"; docs/configuration.md, "Tracing"): spans exported over OTLP/HTTP
// (JSON) from a bounded buffer on the exporter's own thread.
struct TracingConfig {
  std::string otlp_endpoint;  // "" = off; http://HOST:PORT/PATH (e.g. http://127.0.0.1:4318/v1/traces)
  double sample_ratio = 1.0;  // parent-based: a client's sampled flag is obeyed; new traces sampled at this ratio
  std::string service_name = "prefixgate";  // the resource's service.name
  uint32_t max_queued_spans = 2048;         // finished spans waiting for export; beyond, spans are dropped (counted)
  uint32_t max_batch_spans = 512;           // spans per export request
  uint32_t export_delay_ms = 2000;          // a finished span is sent within this long
  uint32_t export_timeout_ms = 5000;        // one export request (and the flush at shutdown, in all)
  bool enabled() const { return !otlp_endpoint.empty(); }
};

struct Config {
  std::string listen = "0.0.0.0:8080";
  std::string admin_listen = "127.0.0.1:9090";
  // "" = off; else HOST:PORT of a listener serving only /healthz and /readyz (probes without the admin API).
  std::string health_listen;
  uint32_t threads = 0;  // 0 = one event loop per core
  // The event-loop threads' CPU time slice under Linux's EEVDF scheduler (util/scheduler_slice.h); 0 = the
  // kernel's default.
  uint32_t scheduler_slice_us = 100;
  std::string log_level = "info";
  std::string log_format = "text";  // text | json (util/log.h)
  uint32_t shutdown_grace_ms = 30000;
  DiscoveryConfig discovery;
  RoutingConfig routing;
  EngineMetricsConfig engine_metrics;
  std::map<std::string, ModelConfig> models;
  StateSyncConfig state_sync;
  UpstreamConfig upstream;
  HealthCheckConfig health_check;
  LimitsConfig limits;
  AuthConfig auth;
  DisaggregationConfig disaggregation;
  // Flow control (CONTRACT.md "flow_control:"; docs/flow-control.md): queues in the gateway while pods are saturated.
  flow::FlowConfig flow_control;
  TracingConfig tracing;
  // 0 = random; any other value seeds every generator (routing, request ids, the prefix hash seed when
  // routing.prefix_cache.hash_seed is null) reproducibly, each purpose and thread its own stream (random_seed.h).
  uint64_t random_seed = 0;
  std::string source;  // the file it was loaded from ("" = built-in defaults)
};

// Every problem found, one line each: "<file>: <key>: <what is wrong>".
using Problems = std::vector<std::string>;

// Parses YAML text (as read from `source`, used in messages and to resolve relative paths).
Config parseYaml(const std::string& text, const std::string& source, Problems& problems);
// Reads and parses a file; a missing or unreadable file is a problem naming it.
Config loadFile(const std::string& path, Problems& problems);

// Every key parseYaml accepts, dotted, with its built-in default as YAML text ("null" for an unset optional). The
// names of models and of their profiles are "<model>" and "<profile>"; discovery.kubernetes.* are included (the
// defaults of that section once present). routing.strategies.<name>.* are not: each strategy reads its own, through
// the strategy registry (routing/strategy_registry.h; log them with a KeyLog around its checkSettings).
std::map<std::string, std::string> knownKeys();

// Applies the AIBrix-compatible environment variables (ROUTING_ALGORITHM, AIBRIX_PREFIX_CACHE_*, ...) over
// `config`. `lookup` returns nullptr for an unset variable.
using EnvLookup = std::function<const char*(const char*)>;
void applyEnvironment(Config& config, const EnvLookup& lookup, Problems& problems);

// Checks cross-field rules and value ranges (names `known_strategies` in the message of an unknown strategy).
void validate(const Config& config, const std::vector<std::string>& known_strategies, Problems& problems);
// disaggregation.decode_strategy and routing.load_only_strategy must each be one of `known_strategies` but not of
// `prompt_match_strategies` (those that score by the prompt's match, which cannot pick a decode pod: the prefill pod
// computed the prompt, so the decode leg goes by load; nor a rerank or score request's pod: it has no prompt to
// match). Apart from validate(), whose callers name only the strategies they use.
void validateDecodeStrategy(const Config& config, const std::vector<std::string>& known_strategies,
                            const std::vector<std::string>& prompt_match_strategies, Problems& problems);

// The environment variables applyEnvironment reads, with the key each one sets (for --help and docs).
const std::vector<std::pair<std::string, std::string>>& environmentVariables();

}  // namespace prefixgate::config
