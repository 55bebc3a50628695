#include "config/config.h"

#include <gtest/gtest.h>

#include <map>
#include "unit/problems.h"

namespace prefixgate::config {
namespace {

const std::vector<std::string> kStrategies = {"least-request", "prefix-cache", "random"};

using testing::hasProblem;

// Defaults match CONTRACT.md when the file sets nothing but discovery.
TEST(Config, DefaultsMatchTheContract) {
  Problems problems;
  Config c = parseYaml("discovery: {file: pods.yaml}\n", "/etc/pg/gw.yaml", problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(c.listen, "0.0.0.0:8080");
  EXPECT_EQ(c.admin_listen, "127.0.0.1:9090");
  EXPECT_EQ(c.routing.strategy, "prefix-cache");
  EXPECT_EQ(c.routing.prefix_cache.block_size, 128u);
  EXPECT_EQ(c.routing.prefix_cache.block_number, 200000u);
  EXPECT_DOUBLE_EQ(c.routing.prefix_cache.standard_deviation_factor, 2.0);
  EXPECT_EQ(c.routing.prefix_cache.scorer, "wait");
  EXPECT_DOUBLE_EQ(c.routing.blend.prefix_cache_weight, 5);
  EXPECT_DOUBLE_EQ(c.routing.blend.prefix_cache_load_balance_weight, 4);
  EXPECT_EQ(c.limits.max_body_bytes, 33554432u);
  EXPECT_EQ(c.limits.max_json_depth, 64u);
  EXPECT_EQ(c.upstream.pool_idle_ms, 4000u);
  // Relative pods file paths resolve against the config file's folder.
  EXPECT_EQ(c.discovery.file, "/etc/pg/pods.yaml");
  validate(c, kStrategies, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

// The auth section: relative files resolve against the config file's folder like discovery.file; the admin body
// limit and the health listener are read and checked.
TEST(Config, AuthFilesResolveAgainstTheConfigFolder) {
  Problems problems;
  Config c = parseYaml(
      "discovery: {file: pods.yaml}\n"
      "health_listen: 0.0.0.0:8081\n"
      "limits: {admin_max_body_bytes: 4096}\n"
      "auth: {api_keys_file: secrets/keys.yaml, admin_token_file: /run/token, forward_authorization: true}\n",
      "/etc/pg/gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.auth.api_keys_file, "/etc/pg/secrets/keys.yaml");
  EXPECT_EQ(c.auth.admin_token_file, "/run/token");
  EXPECT_TRUE(c.auth.forward_authorization);
  EXPECT_EQ(c.limits.admin_max_body_bytes, 4096u);
  EXPECT_EQ(c.health_listen, "0.0.0.0:8081");
  validate(c, kStrategies, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  c.health_listen = "nonsense";
  c.limits.admin_max_body_bytes = 0;
  c.auth.file_poll_interval_ms = 0;
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: health_listen: expected HOST:PORT"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: limits.admin_max_body_bytes: must be greater than 0"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: auth.file_poll_interval_ms: must be greater than 0"));
  // Off by default: no keys, no token, no health listener, 1 MiB admin bodies.
  Config d = parseYaml("discovery: {file: pods.yaml}\n", "/etc/pg/gw.yaml", problems);
  EXPECT_EQ(d.auth.api_keys_file, "");
  EXPECT_EQ(d.auth.admin_token_file, "");
  EXPECT_FALSE(d.auth.forward_authorization);
  EXPECT_EQ(d.health_listen, "");
  EXPECT_EQ(d.limits.admin_max_body_bytes, 1048576u);
}

// Every key of the contract's example parses without an unknown-key complaint.
TEST(Config, ParsesEveryContractKey) {
  Problems problems;
  Config c = parseYaml(R"(
listen: 127.0.0.1:1
admin_listen: 127.0.0.1:2
threads: 3
discovery: {file: /p.yaml}
routing:
  strategy: random
  prefix_cache: {tokenizer: tiktoken, block_size: 64, block_number: 10, eviction_duration_mins: 5,
                 standard_deviation_factor: 1.5, include_tools: false, use_remote_tokenizer: true,
                 kv_event_sync: true, hash_seed: 42}
  blend: {prefix_cache_weight: 2, prefix_cache_load_balance_weight: 3, load_balance_weight: 0}
  load_balance: {lambda: 0.5, alpha: 1, kv_critical: 0.2}
  load_imbalance: {min_gap: 16, factor: 3}
engine_metrics: {scrape_interval_ms: 100, scrape_timeout_ms: 500}
models:
  my-model:
    routing_strategy: least-request
    locked_routing_strategy: ""
    ttft_slo_ms: 750
    profiles:
      long-docs:
        routing_strategy: random
        routing_config: {prefix_cache: {standard_deviation_factor: 3}}
state_sync: {enabled: true, redis: redis://10.0.0.1:6379}
upstream: {connect_timeout_ms: 1, response_header_timeout_ms: 2, idle_timeout_ms: 3, pool_idle_ms: 4, max_retries: 0}
health_check: {interval_ms: 5, timeout_ms: 6, unhealthy_threshold: 7, healthy_threshold: 8}
limits: {max_body_bytes: 9, max_header_bytes: 2048, max_in_flight: 11, header_timeout_ms: 12,
         client_idle_timeout_ms: 13, max_connections: 14, max_json_depth: 15}
)", "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.threads, 3u);
  EXPECT_EQ(c.routing.prefix_cache.tokenizer, "tiktoken");
  EXPECT_EQ(c.routing.prefix_cache.hash_seed.value(), 42u);
  EXPECT_FALSE(c.routing.prefix_cache.include_tools);
  EXPECT_DOUBLE_EQ(c.routing.blend.load_balance_weight, 0);
  EXPECT_EQ(c.models.at("my-model").routing_strategy, "least-request");
  EXPECT_EQ(c.models.at("my-model").ttft_slo_ms, 750u);
  EXPECT_DOUBLE_EQ(c.models.at("my-model").profiles.at("long-docs").standard_deviation_factor.value(), 3);
  EXPECT_TRUE(c.state_sync.enabled);
  EXPECT_EQ(c.limits.max_connections, 14u);
  EXPECT_EQ(c.limits.max_json_depth, 15u);
  EXPECT_EQ(c.health_check.healthy_threshold, 8u);
}

// Problems name the file, the dotted key and what is wrong; all of them are reported, not just the first.
TEST(Config, ProblemsNameFileKeyAndReason) {
  Problems problems;
  parseYaml("routing:\n  strategi: random\n  prefix_cache: {block_size: -3}\nlimits: {max_in_flight: many}\n",
            "gw.yaml", problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.strategi: unknown key"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.prefix_cache.block_size: expected a whole number"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: limits.max_in_flight: expected a whole number"));
  EXPECT_EQ(problems.size(), 3u);
}

// Invalid YAML reports the line.
TEST(Config, InvalidYamlNamesTheLine) {
  Problems problems;
  parseYaml("listen: [\n", "gw.yaml", problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("gw.yaml: line"), std::string::npos);
}

// The AIBrix environment variables override the file, and bad values name the variable and the key.
TEST(Config, EnvironmentOverridesAndValidates) {
  Problems problems;
  Config c = parseYaml("discovery: {file: p.yaml}\nrouting: {strategy: random}\n", "gw.yaml", problems);
  std::map<std::string, std::string> env = {{"ROUTING_ALGORITHM", "least-request"},
                                            {"AIBRIX_PREFIX_CACHE_BLOCK_SIZE", "16"},
                                            {"AIBRIX_PREFIX_CACHE_INCLUDE_TOOLS", "0"},
                                            {"AIBRIX_PREFIX_CACHE_HASH_SEED", "7"},
                                            {"AIBRIX_ROUTING_AUTO_BLEND_LOAD_BALANCE_WEIGHT", "0"},
                                            {"AIBRIX_STATESYNC_ENABLED", "yes-please"},
                                            {"REDIS_HOST", "10.1.2.3"}};
  applyEnvironment(c, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  }, problems);
  EXPECT_EQ(c.routing.strategy, "least-request");
  EXPECT_EQ(c.routing.prefix_cache.block_size, 16u);
  EXPECT_FALSE(c.routing.prefix_cache.include_tools);
  EXPECT_EQ(c.routing.prefix_cache.hash_seed.value(), 7u);
  EXPECT_DOUBLE_EQ(c.routing.blend.load_balance_weight, 0);
  EXPECT_EQ(c.state_sync.redis, "redis://10.1.2.3:6379");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("AIBRIX_STATESYNC_ENABLED (state_sync.enabled): 'yes-please'"), std::string::npos);
}

// Validation catches unknown strategies (listing the valid ones), bad addresses and impossible values.
TEST(Config, ValidateReportsEachBadValue) {
  Problems problems;
  Config c = parseYaml("listen: nope\ndiscovery: {file: p.yaml}\nrouting: {strategy: fastest, prefix_cache: {tokenizer: gpt, scorer: fastest}}\n"
                       "models: {m: {locked_routing_strategy: bogus}}\nlimits: {max_connections: 0}\n",
                       "gw.yaml", problems);
  ASSERT_TRUE(problems.empty());
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "listen: expected HOST:PORT"));
  EXPECT_TRUE(hasProblem(problems, "routing.strategy: unknown strategy 'fastest' (valid: least-request, prefix-cache, random)"));
  EXPECT_TRUE(hasProblem(problems, "routing.prefix_cache.tokenizer: expected character or tiktoken"));
  EXPECT_TRUE(hasProblem(problems, "routing.prefix_cache.scorer: expected wait or blend, got 'fastest'"));
  EXPECT_TRUE(hasProblem(problems, "models.m.locked_routing_strategy: unknown strategy 'bogus'"));
  EXPECT_TRUE(hasProblem(problems, "limits.max_connections: must be greater than 0"));
}

// Every limit a component would refuse at start (or that could exhaust memory) is refused by validation, naming
// the key: the gateway never passes --check and then fails to start.
TEST(Config, ValidateBoundsEveryStartUpLimit) {
  Problems problems;
  Config c = parseYaml("listen: example.com:80\nadmin_listen: '[::1]:9090'\ndiscovery: {file: p.yaml}\n"
                       "routing: {prefix_cache: {eviction_duration_mins: 357914, block_number: 5000000000,"
                       " remote_tokenizer_cache_entries: 100000000000}}\n"
                       "limits: {max_body_bytes: 5000000000, max_header_bytes: 4000000, max_connections: 4000000}\n",
                       "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: listen: the host must be an IP address (or localhost), got 'example.com'"));
  EXPECT_FALSE(hasProblem(problems, "admin_listen"));
  EXPECT_TRUE(hasProblem(problems, "routing.prefix_cache.eviction_duration_mins: must be at most 357913"));
  EXPECT_TRUE(hasProblem(problems, "routing.prefix_cache.block_number: must be at most"));
  EXPECT_TRUE(hasProblem(problems, "routing.prefix_cache.remote_tokenizer_cache_entries: must be at most 10000000"));
  EXPECT_TRUE(hasProblem(problems, "limits.max_body_bytes: must be at most 1073741824"));
  EXPECT_TRUE(hasProblem(problems, "limits.max_header_bytes: must be at most 1048576"));
  EXPECT_TRUE(hasProblem(problems, "limits.max_connections: must be at most 1000000"));
  Problems ok;
  c = parseYaml("discovery: {file: p.yaml}\nrouting: {prefix_cache: {eviction_duration_mins: 357913}}\n", "gw.yaml", ok);
  validate(c, kStrategies, ok);
  EXPECT_TRUE(ok.empty()) << ok.front();
}

// The KV event sync and capacity-aware keys: defaults (capacity-aware standard mode on, KV sync off), parsing, and
// the ranges validation enforces (the file and key named).
TEST(Config, KvSyncAndCapacityKeys) {
  Problems problems;
  Config defaults = parseYaml("discovery: {file: p.yaml}\n", "gw.yaml", problems);
  EXPECT_TRUE(defaults.routing.prefix_cache.capacity_aware);
  EXPECT_FALSE(defaults.routing.prefix_cache.kv_event_sync);
  EXPECT_EQ(defaults.routing.prefix_cache.speculative_ttl_ms, 2000u);
  Config c = parseYaml("discovery: {file: p.yaml}\nrouting: {prefix_cache: {kv_event_sync: true, capacity_aware: false, "
                       "speculative_ttl_ms: 0, silent_publisher_ms: 0, cpu_block_credit: 1.5}}\n",
                       "gw.yaml", problems);
  ASSERT_TRUE(problems.empty());
  EXPECT_TRUE(c.routing.prefix_cache.kv_event_sync);
  EXPECT_FALSE(c.routing.prefix_cache.capacity_aware);
  EXPECT_TRUE(c.routing.prefix_cache.remoteTokenizerOn());
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.prefix_cache.silent_publisher_ms: must be greater than 0"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: routing.prefix_cache.cpu_block_credit: must be in [0, 1]"));
  EXPECT_FALSE(hasProblem(problems, "kv_event_sync"));  // supported now: no longer refused
}

// The state sync keys: enabled is accepted now (replicas share through Redis), every key parses, and bad values are
// refused naming the file, the key and why (a Redis URL that is not one, a heartbeat that outlives nothing).
TEST(Config, StateSyncKeys) {
  Problems problems;
  Config defaults = parseYaml("discovery: {file: p.yaml}\nstate_sync: {enabled: true}\n", "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  validate(defaults, kStrategies, problems);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(defaults.state_sync.flush_interval_ms, 5u);
  EXPECT_EQ(defaults.state_sync.key_prefix, "prefixgate");
  Config c = parseYaml("discovery: {file: p.yaml}\nstate_sync: {enabled: true, redis: 'http://r:1', key_prefix: 'a b',"
                       " flush_interval_ms: 5000, load_interval_ms: 500, replica_ttl_ms: 400, max_blocks_per_record: 0,"
                       " snapshot_max_records: 7, replica_id: gw-1}\n",
                       "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.state_sync.snapshot_max_records, 7u);
  EXPECT_EQ(c.state_sync.replica_id, "gw-1");
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: state_sync.redis: "));
  EXPECT_TRUE(hasProblem(problems, "state_sync.key_prefix / replica_id: must not contain spaces"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: state_sync.flush_interval_ms: must be at most 1000"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: state_sync.replica_ttl_ms: must be longer than state_sync.load_interval_ms (500)"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: state_sync.max_blocks_per_record: must be greater than 0"));
  EXPECT_EQ(problems.size(), 5u);
}

// The passive ejection and response-limit keys: defaults, parsing, and ranges (the file and key named).
TEST(Config, EjectionAndResponseLimitKeys) {
  Problems problems;
  Config defaults = parseYaml("discovery: {file: p.yaml}\n", "gw.yaml", problems);
  EXPECT_EQ(defaults.health_check.distinct_request_failures, 3u);
  EXPECT_EQ(defaults.health_check.max_ejection_percent, 50u);
  EXPECT_EQ(defaults.health_check.panic_threshold_percent, 50u);
  EXPECT_EQ(defaults.upstream.max_response_bytes, 0u);
  Config c = parseYaml("discovery: {file: p.yaml}\nupstream: {max_response_bytes: 1048576}\n"
                       "health_check: {distinct_request_failures: 0, max_ejection_percent: 101, "
                       "panic_threshold_percent: 150}\n",
                       "gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.upstream.max_response_bytes, 1048576u);
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: health_check.distinct_request_failures: must be greater than 0"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: health_check.max_ejection_percent: must be in [0, 100]"));
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: health_check.panic_threshold_percent: must be in [0, 100]"));
  EXPECT_EQ(problems.size(), 3u);
}

// limits.max_json_depth: 1 to 1000 pass; 0 and 1001 are refused, naming the file, the key and the range.
TEST(Config, JsonDepthRange) {
  for (uint32_t depth : {0u, 1u, 1000u, 1001u}) {
    Problems problems;
    Config c = parseYaml("discovery: {file: p.yaml}\nlimits: {max_json_depth: " + std::to_string(depth) + "}\n",
                         "gw.yaml", problems);
    validate(c, kStrategies, problems);
    const bool refused = hasProblem(problems, "gw.yaml: limits.max_json_depth: must be from 1 to 1000");
    EXPECT_EQ(refused, depth == 0 || depth == 1001) << depth;
  }
}

// The event loops' scheduler slice: 0 (the kernel's default) or the kernel's own bounds, 100 us to 100 ms; 100 by
// default.
TEST(Config, SchedulerSliceRange) {
  for (uint32_t us : {0u, 99u, 100u, 100000u, 100001u}) {
    Problems problems;
    Config c = parseYaml("discovery: {file: p.yaml}\nscheduler_slice_us: " + std::to_string(us) + "\n", "gw.yaml",
                         problems);
    validate(c, kStrategies, problems);
    const bool refused = hasProblem(problems, "gw.yaml: scheduler_slice_us: must be 0 (the kernel's default) or "
                                              "from 100 to 100000, got " + std::to_string(us));
    EXPECT_EQ(refused, us == 99 || us == 100001) << us;
    EXPECT_EQ(c.scheduler_slice_us, us);
  }
  EXPECT_EQ(Config{}.scheduler_slice_us, 100u);
}

// Keys that were settings and are now fixed in code are refused like unknown keys (so --check fails), each named
// with the file and why: no longer a setting, at what value it is fixed, remove it.
TEST(Config, RetiredKeysAreRefusedNamingFileKeyAndValue) {
  Problems problems;
  parseYaml("discovery: {file: p.yaml}\n"
            "routing: {prefix_cache: {kv_event_replay_hold_mb: 128, kv_event_poll_round_kb: 64}}\n"
            "state_sync: {stream_max_entries: 100}\n",
            "/etc/pg/gw.yaml", problems);
  ASSERT_EQ(problems.size(), 3u);
  EXPECT_EQ(problems[0], "/etc/pg/gw.yaml: routing.prefix_cache.kv_event_replay_hold_mb: no longer a setting "
                         "(fixed at 64 MiB per publisher); remove it");
  EXPECT_EQ(problems[1], "/etc/pg/gw.yaml: routing.prefix_cache.kv_event_poll_round_kb: no longer a setting "
                         "(fixed at 1024 KiB per publisher and round); remove it");
  EXPECT_EQ(problems[2], "/etc/pg/gw.yaml: state_sync.stream_max_entries: no longer a setting (fixed at 4096 "
                         "entries); remove it");
  EXPECT_EQ(knownKeys().count("state_sync.stream_max_entries"), 0u);
}

// A configuration without any discovery source is rejected.
TEST(Config, DiscoveryIsRequired) {
  Problems problems;
  Config c = parseYaml("listen: 127.0.0.1:1\n", "gw.yaml", problems);
  validate(c, kStrategies, problems);
  EXPECT_TRUE(hasProblem(problems, "gw.yaml: discovery: set discovery.file"));
}

// A missing file is one clear problem naming it.
TEST(Config, MissingFileIsAProblem) {
  Problems problems;
  loadFile("/nonexistent/prefixgate.yaml", problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "/nonexistent/prefixgate.yaml: cannot read the file");
}

}  // namespace
}  // namespace prefixgate::config
