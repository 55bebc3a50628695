// AIBrix-compatible environment variables over the YAML file, so a user of that gateway can switch by changing
// the image. Each variable sets one key; a bad value is a problem naming the variable and the key.
#include <charconv>
#include <cmath>

#include "config/config.h"
#include "config/value_parse.h"

namespace prefixgate::config {
namespace {

struct EnvBinding {
  const char* variable;
  const char* key;
  // Applies text to the config; returns an empty string or what is wrong.
  std::string (*apply)(Config&, const std::string&);
};

const char* kBoolMsg = "expected true, false, 1 or 0";
const char* kUintMsg = "expected a non-negative whole number";
const char* kNumMsg = "expected a number";

#define PG_BOOL(field) [](Config& c, const std::string& v) -> std::string { return parseBool(v, c.field) ? "" : kBoolMsg; }
#define PG_UINT(field) [](Config& c, const std::string& v) -> std::string { return parseUnsigned(v, c.field) ? "" : kUintMsg; }
#define PG_NUM(field) [](Config& c, const std::string& v) -> std::string { return parseDouble(v, c.field) ? "" : kNumMsg; }
#define PG_STR(field) [](Config& c, const std::string& v) -> std::string { c.field = v; return ""; }

const std::vector<EnvBinding>& bindings() {
  static const std::vector<EnvBinding> kBindings = {
      {"ROUTING_ALGORITHM", "routing.strategy", PG_STR(routing.strategy)},
      {"AIBRIX_PREFIX_CACHE_TOKENIZER_TYPE", "routing.prefix_cache.tokenizer", PG_STR(routing.prefix_cache.tokenizer)},
      {"AIBRIX_PREFIX_CACHE_BLOCK_SIZE", "routing.prefix_cache.block_size", PG_UINT(routing.prefix_cache.block_size)},
      {"AIBRIX_PREFIX_CACHE_BLOCK_NUMBER", "routing.prefix_cache.block_number", PG_UINT(routing.prefix_cache.block_number)},
      {"AIBRIX_PREFIX_CACHE_EVICTION_DURATION_MINS", "routing.prefix_cache.eviction_duration_mins",
       PG_UINT(routing.prefix_cache.eviction_duration_mins)},
      {"AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR", "routing.prefix_cache.standard_deviation_factor",
       PG_NUM(routing.prefix_cache.standard_deviation_factor)},
      {"AIBRIX_PREFIX_CACHE_INCLUDE_TOOLS", "routing.prefix_cache.include_tools", PG_BOOL(routing.prefix_cache.include_tools)},
      {"AIBRIX_PREFIX_CACHE_USE_REMOTE_TOKENIZER", "routing.prefix_cache.use_remote_tokenizer",
       PG_BOOL(routing.prefix_cache.use_remote_tokenizer)},
      {"AIBRIX_PREFIX_CACHE_KV_EVENT_SYNC_ENABLED", "routing.prefix_cache.kv_event_sync",
       PG_BOOL(routing.prefix_cache.kv_event_sync)},
      {"AIBRIX_PREFIX_CACHE_HASH_SEED", "routing.prefix_cache.hash_seed",
       [](Config& c, const std::string& v) -> std::string {
         uint64_t seed = 0;
         if (!parseUnsigned(v, seed)) return kUintMsg;
         c.routing.prefix_cache.hash_seed = seed;
         return "";
       }},
      {"AIBRIX_ROUTING_AUTO_BLEND_PREFIX_CACHE_WEIGHT", "routing.blend.prefix_cache_weight",
       PG_NUM(routing.blend.prefix_cache_weight)},
      {"AIBRIX_ROUTING_AUTO_BLEND_PREFIX_CACHE_LOAD_BALANCE_WEIGHT", "routing.blend.prefix_cache_load_balance_weight",
       PG_NUM(routing.blend.prefix_cache_load_balance_weight)},
      {"AIBRIX_ROUTING_AUTO_BLEND_LOAD_BALANCE_WEIGHT", "routing.blend.load_balance_weight",
       PG_NUM(routing.blend.load_balance_weight)},
      {"AIBRIX_LOAD_BALANCE_IMBALANCE_MIN_GAP", "routing.load_imbalance.min_gap", PG_UINT(routing.load_imbalance.min_gap)},
      {"AIBRIX_LOAD_BALANCE_IMBALANCE_FACTOR", "routing.load_imbalance.factor", PG_NUM(routing.load_imbalance.factor)},
      {"AIBRIX_STATESYNC_ENABLED", "state_sync.enabled", PG_BOOL(state_sync.enabled)},
  };
  return kBindings;
}

#undef PG_BOOL
#undef PG_UINT
#undef PG_NUM
#undef PG_STR

}  // namespace

void applyEnvironment(Config& config, const EnvLookup& lookup, Problems& problems) {
  for (const EnvBinding& b : bindings()) {
    const char* value = lookup(b.variable);
    if (!value) continue;
    std::string what = b.apply(config, value);
    if (!what.empty())
      problems.push_back(std::string("environment: ") + b.variable + " (" + b.key + "): '" + value + "': " + what);
  }
  // REDIS_HOST / REDIS_PORT, as the AIBrix gateway reads them, build the state-sync address.
  const char* host = lookup("REDIS_HOST");
  const char* port = lookup("REDIS_PORT");
  if (host || port) {
    uint32_t p = 6379;
    if (port && !parseUnsigned(std::string(port), p))
      problems.push_back(std::string("environment: REDIS_PORT (state_sync.redis): '") + port + "': " + kUintMsg);
    config.state_sync.redis = "redis://" + std::string(host ? host : "127.0.0.1") + ":" + std::to_string(p);
  }
}

const std::vector<std::pair<std::string, std::string>>& environmentVariables() {
  static const std::vector<std::pair<std::string, std::string>> kList = [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const EnvBinding& b : bindings()) out.emplace_back(b.variable, b.key);
    out.emplace_back("REDIS_HOST", "state_sync.redis");
    out.emplace_back("REDIS_PORT", "state_sync.redis");
    return out;
  }();
  return kList;
}

}  // namespace prefixgate::config
