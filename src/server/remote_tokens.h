#pragma once
// The step before routing that asks the remote tokenizer for a request's tokens (routing.prefix_cache
// .use_remote_tokenizer, or kv_event_sync): only when the request resolves to a strategy that hashes prompts.
// Success puts the engine's ids in the request; failure marks it, and the strategy then scores it by load alone
// (never by hashes of another token domain).
#include <boost/asio/awaitable.hpp>
#include <string_view>

#include "openai/request.h"
#include "routing/router.h"
#include "tokenize/remote_tokenizer.h"

namespace prefixgate::server {

class Gateway;

// What the remote tokenizer did for one request, for /debug/route.
struct RemoteTokensReport {
  std::string_view outcome;     // tokenize::outcomeLabel; "" when it was not asked
  // The dialect spoken to the pod that answered or failed ("vllm", "sglang", "llamacpp"; for "unsupported" the one
  // that cannot); "" when no pod was asked (a cache hit keeps tokens, not who made them; no_pod; not asked).
  std::string_view engine;
  bool engine_assumed = false;  // that pod's engine was not recognised yet: it was spoken to as vLLM
};

// Fills request.remote_token_ids / remote_tokens when the remote tokenizer is on and `query` (whose request is
// `request`) resolves to a strategy that wants prompt tokens; otherwise leaves remote_tokens at kNone. Unless
// query.dry_run, counts the outcome (prefixgate_remote_tokenizer_*, and aibrix_prefix_cache_routing_errors_total
// {reason="tokenize_failed"} whenever no tokens came, "unsupported" included) and logs why (throttled). Runs on the
// calling event loop, never blocks it, and completes within routing.prefix_cache.remote_tokenizer_timeout_ms.
// `pool`: the calling thread's connections, or null.
boost::asio::awaitable<RemoteTokensReport> fetchRemoteTokens(Gateway& gateway, const routing::RoutePlan& plan,
                                                             const routing::RouteQuery& query,
                                                             openai::RequestView& request,
                                                             tokenize::ConnectionPool* pool);

// Where the tokens of the decision came from, for /debug/route: "remote", "remote_failed" or "local".
std::string_view tokensSource(const openai::RequestView& request);

}  // namespace prefixgate::server
