#pragma once
// The remote tokenizer: a prompt's token ids from the engine itself (a ready pod serving the model, asked in its own
// dialect: vLLM's or SGLang's POST /tokenize, llama.cpp's /apply-template then /tokenize; see tokenize_protocol.h),
// so the gateway hashes the same ids the engine caches (and reports in its KV events). Answers are cached by a hash
// of the request's JSON (TokenCache); a miss costs one HTTP exchange (two for a chat request on llama.cpp), bounded
// by a timeout, on the calling thread's keep-alive connections. A pod that timed out, could not be reached or was
// slower than a hedge is skipped for a while (TokenizeBreakers); a pod that has not answered within the hedge delay
// is raced by a second one. Failures are returned, never thrown: the caller routes without tokens.
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "net/upstream_stream.h"
#include "tokenize/token_cache.h"
#include "tokenize/tokenize_breaker.h"
#include "tokenize/tokenize_protocol.h"

namespace prefixgate::tokenize {

// Keep-alive connections of one event-loop thread, by pod id (the worker's upstream pool fits: relays and tokenize
// calls then share connections). Used only from that thread.
class ConnectionPool {
 public:
  virtual ~ConnectionPool() = default;
  // An idle connection to the pod, or null.
  virtual std::unique_ptr<net::UpstreamStream> take(uint32_t pod) = 0;
  // A connection whose last exchange ended cleanly.
  virtual void give(uint32_t pod, std::unique_ptr<net::UpstreamStream> stream) = 0;
};

enum class TokenizeOutcome {
  kHit,          // from the cache
  kMiss,         // not cached: an engine answered (and the answer is now cached)
  kError,        // connection failures (after the retry), an error status, or an answer that does not parse
  kTimeout,      // no answer within the timeout
  kNoPod,        // no ready pod serves the model
  kUnsupported,  // no ready pod's dialect can tokenize the request (a chat request on SGLang): nothing was sent
  kBreakerOpen,  // every pod that could was skipped: its breaker is open after a failure (TokenizeBreakers)
};
// "hit", "miss", "error", "timeout", "no_pod", "unsupported", "breaker_open" (metric labels).
std::string_view outcomeLabel(TokenizeOutcome outcome);

struct TokenizeResult {
  TokenizeOutcome outcome = TokenizeOutcome::kError;
  TokenCache::Tokens tokens;  // set for kHit and kMiss (shared with the cache, never modified)
  std::string pod;            // the pod that answered or failed last ("" for hits and kNoPod)
  // The dialect spoken to `pod` (for kUnsupported: the dialect that cannot); kAuto when no pod was involved (hits,
  // kNoPod: the cache keeps tokens, not who made them).
  engine::EngineKind engine = engine::EngineKind::kAuto;
  bool engine_assumed = false;  // `pod`'s engine is not known yet: it was spoken to as vLLM (the default)
  std::string error;          // why it failed, naming the pod, its dialect and the step, for the log
  double seconds = 0;         // time spent, cache lookup included
  bool ok() const { return tokens != nullptr; }
};

struct RemoteTokenizerOptions {
  std::chrono::milliseconds timeout{500};  // routing.prefix_cache.remote_tokenizer_timeout_ms: the whole call
  size_t cache_entries = 10000;            // routing.prefix_cache.remote_tokenizer_cache_entries
  size_t cache_bytes = size_t{64} << 20;   // routing.prefix_cache.remote_tokenizer_cache_mb (TokenCache::bytes)
  // An answer longer than the model's context (the engine's max_model_len) is used but not cached: the engine will
  // refuse the request anyway. When the engine does not say (llama.cpp), this bound stands in for the context.
  size_t max_cached_tokens = 131072;  // routing.prefix_cache.remote_tokenizer_max_cached_tokens
  // A second pod is asked when the first has not answered this long after the call began; the first good answer
  // wins. 0 (or not below the timeout): never. routing.prefix_cache.remote_tokenizer_hedge_delay_ms.
  std::chrono::milliseconds hedge_delay{125};
  BreakerOptions breaker;  // routing.prefix_cache.remote_tokenizer_breaker_backoff_ms, _max_backoff_ms
  // A larger answer (either of llama.cpp's two) is an error (a 128k-token prompt answers ~1.3 MB).
  size_t max_answer_bytes = 64u << 20;
};

// What the request path asks for a prompt's engine token ids (RemoteTokenizer; a fake in tests).
class PromptTokenizer {
 public:
  virtual ~PromptTokenizer() = default;
  // The input's tokens, or why there are none (never thrown). Runs on the calling coroutine's executor and never
  // blocks it. `input`'s views and `pool` (the calling thread's connections, or null) must stay valid until it
  // completes. Thread-safe.
  virtual boost::asio::awaitable<TokenizeResult> tokenize(const TokenizeInput& input, ConnectionPool* pool) = 0;
};

class RemoteTokenizer final : public PromptTokenizer {
 public:
  // Fills `out` with the ready pods serving `model` and their in-flight counts. Called on event-loop threads,
  // concurrently: must be thread-safe and must not block.
  using PodLookup = std::function<void(std::string_view model, std::vector<TokenizerPod>& out)>;

  RemoteTokenizer(RemoteTokenizerOptions options, PodLookup lookup);

  // The input's tokens: from the cache, else from the least-loaded ready pod whose dialect can tokenize the input
  // (known dialects before pods not recognised yet; ties rotate between calls; pods whose breaker is open skipped),
  // with at most one more pod: a hedge when the first has not answered within options.hedge_delay (the first good
  // answer wins, the other exchange is cancelled), or a retry after a connection failure (a reused pooled
  // connection that fails before any answer byte is first retried on a fresh one, to the same pod; llama.cpp's two
  // exchanges share one connection). kUnsupported, without a call, when no ready pod's dialect can; kBreakerOpen
  // when every pod that could is skipped. Each pod's outcome goes to its breaker. Runs on the calling coroutine's
  // executor (a one-thread io_context: the hedge runs beside the call on it) and never blocks it; completes within
  // options.timeout. `pool`: that thread's connections, or null for fresh ones each time. `input`'s views and
  // `pool` must stay valid until it completes. Thread-safe (one object serves all threads).
  boost::asio::awaitable<TokenizeResult> tokenize(const TokenizeInput& input, ConnectionPool* pool) override;

  TokenCache& cache() { return cache_; }
  const RemoteTokenizerOptions& options() const { return options_; }

  // The tokenize breaker of pod `pod` (TokenizerPod::id) now, for /debug/pods. Thread-safe.
  TokenizeBreakers::View breaker(uint32_t pod) const;
  // Times a breaker opened, by the failure that opened it. Thread-safe.
  uint64_t breakerOpens(BreakerFailure why) const { return breakers_.opens(why); }
  // The pod left the fleet: its breaker is dropped. Thread-safe.
  void forgetPod(uint32_t pod) { breakers_.forget(pod); }

  // Hedges sent, by what came of them. Thread-safe.
  struct HedgeCounts {
    uint64_t won = 0;     // the hedge's answer was used
    uint64_t lost = 0;    // the first pod's answer came first
    uint64_t failed = 0;  // neither answered
  };
  HedgeCounts hedges() const;

 private:
  RemoteTokenizerOptions options_;
  PodLookup lookup_;
  TokenCache cache_;
  TokenizeBreakers breakers_;
  std::atomic<uint64_t> hedges_won_{0}, hedges_lost_{0}, hedges_failed_{0};
};

}  // namespace prefixgate::tokenize
