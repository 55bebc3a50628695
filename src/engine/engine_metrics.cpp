#include "engine/engine_metrics.h"

#include <cmath>
#include <span>
#include <nlohmann/json.hpp>

#include "engine/prometheus_text.h"

namespace prefixgate::engine {
namespace {

// The signals a page can carry, each a sum (or a mean) over its series.
enum class Signal {
  kRunning,
  kWaiting,
  kKvUsage,
  kKvUsageOld,      // vLLM's older name: read only when the new one is absent
  kHits,            // prompt tokens served from the cache
  kHitsOld,
  kQueries,         // prompt tokens looked up
  kQueriesOld,
  kUncachedPrompt,  // llama.cpp: prompt tokens computed (queries = hits + these)
  kKvCapacity,      // the KV cache's size in tokens
  kCacheConfig,     // vLLM's info gauge: block_size and num_gpu_blocks in its labels
  kCount,
};

struct SeriesName {
  std::string_view name;
  Signal signal;
};

constexpr SeriesName kVllmNames[] = {
    {"vllm:num_requests_running", Signal::kRunning},
    {"vllm:num_requests_waiting", Signal::kWaiting},
    {"vllm:kv_cache_usage_perc", Signal::kKvUsage},
    {"vllm:gpu_cache_usage_perc", Signal::kKvUsageOld},
    {"vllm:prefix_cache_hits_total", Signal::kHits},
    {"vllm:prefix_cache_hits", Signal::kHits},
    {"vllm:gpu_prefix_cache_hits_total", Signal::kHitsOld},
    {"vllm:prefix_cache_queries_total", Signal::kQueries},
    {"vllm:prefix_cache_queries", Signal::kQueries},
    {"vllm:gpu_prefix_cache_queries_total", Signal::kQueriesOld},
    {"vllm:cache_config_info", Signal::kCacheConfig},
};

constexpr SeriesName kSglangNames[] = {
    {"sglang:num_running_reqs", Signal::kRunning},
    {"sglang:num_queue_reqs", Signal::kWaiting},
    {"sglang:token_usage", Signal::kKvUsage},
    {"sglang:cached_tokens_total", Signal::kHits},
    {"sglang:prompt_tokens_total", Signal::kQueries},
    {"sglang:max_total_num_tokens", Signal::kKvCapacity},
};

constexpr SeriesName kLlamaCppNames[] = {
    {"llamacpp:requests_processing", Signal::kRunning},
    {"llamacpp:requests_deferred", Signal::kWaiting},
    {"llamacpp:prompt_tokens_cached_total", Signal::kHits},
    {"llamacpp:prompt_tokens_total", Signal::kUncachedPrompt},
};

struct Dialect {
  EngineKind kind;
  std::string_view prefix;  // every series of the engine starts with it
  std::span<const SeriesName> names;
};

constexpr Dialect kDialects[] = {
    {EngineKind::kVllm, "vllm:", kVllmNames},
    {EngineKind::kSglang, "sglang:", kSglangNames},
    {EngineKind::kLlamaCpp, "llamacpp:", kLlamaCppNames},
};

const Dialect* dialectOf(EngineKind kind) {
  for (const Dialect& d : kDialects)
    if (d.kind == kind) return &d;
  return nullptr;
}

const Dialect* dialectByName(std::string_view name) {
  for (const Dialect& d : kDialects)
    if (name.starts_with(d.prefix)) return &d;
  return nullptr;
}

double labelNumber(const PromSample& s, std::string_view key, bool& ok) {
  double v = 0;
  ok = parsePromValue(s.label(key), v) && std::isfinite(v);
  return ok ? v : 0;
}

class DialectVisitor final : public PromVisitor {
 public:
  explicit DialectVisitor(const Dialect* dialect) : dialect_(dialect) {}

  // The parser calls sample() right after a wants() that returned true for the same line.
  bool wants(std::string_view name) override {
    if (!dialect_) {
      dialect_ = dialectByName(name);  // auto: the first known engine's series decides
      if (!dialect_) return false;
    }
    if (!name.starts_with(dialect_->prefix)) return false;
    for (const SeriesName& n : dialect_->names)
      if (n.name == name) {
        current_ = n.signal;
        return true;
      }
    return false;
  }

  void sample(const PromSample& s) override {
    ++known_;
    if (current_ == Signal::kCacheConfig) {
      bool ok_size = false, ok_blocks = false;
      const double size = labelNumber(s, "block_size", ok_size);
      const double blocks = labelNumber(s, "num_gpu_blocks", ok_blocks);
      if (ok_size) block_size_ = size;
      if (ok_blocks) gpu_blocks_ += blocks;
      config_seen_ |= ok_size || ok_blocks;
      return;
    }
    if (!std::isfinite(s.value)) return;  // NaN (e.g. no data yet) or Inf: not a load
    const size_t i = static_cast<size_t>(current_);
    sum_[i] += s.value;
    ++count_[i];
  }

  EngineSnapshot snapshot() const {
    EngineSnapshot out;
    out.valid = true;
    out.engine = dialect_ ? dialect_->kind : EngineKind::kAuto;
    out.known_series = known_;
    out.has_running = take(Signal::kRunning, out.running);
    out.has_waiting = take(Signal::kWaiting, out.waiting);
    const Signal usage = has(Signal::kKvUsage) ? Signal::kKvUsage : Signal::kKvUsageOld;
    out.has_kv_usage = take(usage, out.kv_usage);
    if (out.has_kv_usage) out.kv_usage /= static_cast<double>(count(usage));  // one cache per engine: the mean
    const bool hits = take(Signal::kHits, out.prefix_cache_hits) || take(Signal::kHitsOld, out.prefix_cache_hits);
    bool queries =
        take(Signal::kQueries, out.prefix_cache_queries) || take(Signal::kQueriesOld, out.prefix_cache_queries);
    double uncached = 0;
    if (!queries && hits && take(Signal::kUncachedPrompt, uncached)) {
      out.prefix_cache_queries = out.prefix_cache_hits + uncached;
      queries = true;
    }
    out.has_prefix_cache = hits && queries;
    // Finite samples can still add up (or multiply) past a double's range: such a total is no reading.
    if (config_seen_ && std::isfinite(gpu_blocks_)) {
      out.has_cache_config = true;
      out.block_size = block_size_;
      out.num_gpu_blocks = gpu_blocks_;
      if (block_size_ > 0 && gpu_blocks_ > 0 && std::isfinite(block_size_ * gpu_blocks_)) {
        out.kv_capacity_tokens = block_size_ * gpu_blocks_;
        out.has_kv_capacity = true;
      }
    }
    if (!out.has_kv_capacity && take(Signal::kKvCapacity, out.kv_capacity_tokens))
      out.has_kv_capacity = out.kv_capacity_tokens >= 1;
    return out;
  }

 private:
  size_t count(Signal s) const { return count_[static_cast<size_t>(s)]; }
  bool has(Signal s) const { return count(s) > 0; }
  bool take(Signal s, double& out) const {
    if (!has(s) || !std::isfinite(sum_[static_cast<size_t>(s)])) return false;  // a sum past a double's range
    out = sum_[static_cast<size_t>(s)];
    return true;
  }
  const Dialect* dialect_;
  Signal current_ = Signal::kRunning;
  uint32_t known_ = 0;
  double sum_[static_cast<size_t>(Signal::kCount)] = {};
  size_t count_[static_cast<size_t>(Signal::kCount)] = {};
  double block_size_ = 0;
  double gpu_blocks_ = 0;
  bool config_seen_ = false;
};

}  // namespace

EngineSnapshot parseEngineMetrics(EngineKind kind, std::string_view text) {
  DialectVisitor visitor(dialectOf(kind));
  parsePromText(text, visitor);
  return visitor.snapshot();
}

EngineKind recogniseEngine(std::string_view text) {
  // Cheaper than a parse: a series name of a known engine starts a line.
  for (const Dialect& d : kDialects) {
    for (size_t at = text.find(d.prefix); at != std::string_view::npos; at = text.find(d.prefix, at + 1))
      if (at == 0 || text[at - 1] == '\n') return d.kind;
  }
  return EngineKind::kAuto;
}

std::string_view unreportedSignals(EngineKind kind) {
  switch (kind) {
    case EngineKind::kLlamaCpp: return "kv_cache_usage";  // capacity: /props
    case EngineKind::kSglang: return "block_size";
    case EngineKind::kVllm:
    case EngineKind::kAuto: break;
  }
  return "";
}

bool parseLlamaCppProps(std::string_view body, SlotCapacity& out, std::string& error) {
  constexpr int64_t kMaxValue = int64_t{1} << 31;
  const nlohmann::json props = nlohmann::json::parse(body, nullptr, false);
  if (props.is_discarded() || !props.is_object()) {
    error = "/props is not a JSON object";
    return false;
  }
  auto whole = [&](const nlohmann::json& v, const char* what, uint32_t& to) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxValue) {
      error = std::string("/props has no whole ") + what + " from 1 to 2^31";
      return false;
    }
    to = static_cast<uint32_t>(v.get<int64_t>());
    return true;
  };
  const auto slots = props.find("total_slots");
  const auto settings = props.find("default_generation_settings");
  if (slots == props.end() || settings == props.end() || !settings->is_object() || !settings->contains("n_ctx")) {
    error = "/props lacks total_slots or default_generation_settings.n_ctx";
    return false;
  }
  return whole(*slots, "total_slots", out.slots) && whole(settings->at("n_ctx"), "n_ctx", out.slot_context_tokens);
}

}  // namespace prefixgate::engine
