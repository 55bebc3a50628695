#pragma once
// The remote tokenizer: a prompt's token ids from the engine itself (a ready pod serving the model, asked in its own
// dialect: vLLM's or SGLang's POST /tokenize, llama.cpp's /apply-template then /tokenize; see tokenize_protocol.h),
// so the gateway hashes the same ids the engine caches (and reports in its KV events). Answers are cached by a hash
// of the request's JSON (TokenCache); a miss costs one HTTP exchange (two for a chat request on llama.cpp), bounded
// by a timeout, on the calling thread's keep-alive connections. Failures are returned, never thrown: the caller
// routes without tokens.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenize/token_cache.h"
#include "tokenize/tokenize_protocol.h"

namespace prefixgate::tokenize {

// Keep-alive connections of one event-loop thread, by pod id (the worker's upstream pool fits: relays and tokenize
// calls then share connections). Used only from that thread.
class ConnectionPool {
 public:
  virtual ~ConnectionPool() = default;
  // An idle connection to the pod, or null.
  virtual std::unique_ptr<boost::beast::tcp_stream> take(uint32_t pod) = 0;
  // A connection whose last exchange ended cleanly.
  virtual void give(uint32_t pod, std::unique_ptr<boost::beast::tcp_stream> stream) = 0;
};

enum class TokenizeOutcome {
  kHit,          // from the cache
  kMiss,         // not cached: an engine answered (and the answer is now cached)
  kError,        // connection failures (after the retry), an error status, or an answer that does not parse
  kTimeout,      // no answer within the timeout
  kNoPod,        // no ready pod serves the model
  kUnsupported,  // no ready pod's dialect can tokenize the request (a chat request on SGLang): nothing was sent
};
// "hit", "miss", "error", "timeout", "no_pod", "unsupported" (metric labels).
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
  // A larger answer (either of llama.cpp's two) is an error (a 128k-token prompt answers ~1.3 MB).
  size_t max_answer_bytes = 64u << 20;
};

class RemoteTokenizer {
 public:
  // Fills `out` with the ready pods serving `model` and their in-flight counts. Called on event-loop threads,
  // concurrently: must be thread-safe and must not block.
  using PodLookup = std::function<void(std::string_view model, std::vector<TokenizerPod>& out)>;

  RemoteTokenizer(RemoteTokenizerOptions options, PodLookup lookup);

  // The input's tokens: from the cache, else from the least-loaded ready pod whose dialect can tokenize the input
  // (known dialects before pods not recognised yet; ties rotate between calls), with one retry on the next such pod
  // after a connection failure (a reused pooled connection that fails before any answer byte is first retried on a
  // fresh one, to the same pod; llama.cpp's two exchanges share one connection). kUnsupported, without a call, when
  // no ready pod's dialect can. Runs on the calling coroutine's executor and never blocks it; completes within
  // options.timeout. `pool`: that thread's connections, or null for fresh ones each time. `input`'s views and
  // `pool` must stay valid until it completes. Thread-safe (one object serves all threads).
  boost::asio::awaitable<TokenizeResult> tokenize(const TokenizeInput& input, ConnectionPool* pool);

  TokenCache& cache() { return cache_; }
  const RemoteTokenizerOptions& options() const { return options_; }

 private:
  RemoteTokenizerOptions options_;
  PodLookup lookup_;
  TokenCache cache_;
};

}  // namespace prefixgate::tokenize
