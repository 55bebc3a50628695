#include "server/remote_tokens.h"

#include "routing/prefix/prefix_metrics.h"
#include "server/gateway.h"
#include "util/log.h"

namespace prefixgate::server {
namespace {

using RemoteTokens = openai::RequestView::RemoteTokens;

// When no engine answers, every request fails the same way: one warning a second says so without flooding.
log::Throttle tokenize_warnings;

void warnThrottled(const openai::RequestView& request, const tokenize::TokenizeResult& result) {
  uint64_t suppressed = 0;
  if (!tokenize_warnings.allow(suppressed)) return;
  log::warn("remote tokenizer: {} for model {} ({}); routing by load alone ({} more since the last such line)",
            tokenize::outcomeLabel(result.outcome), request.model, result.error, suppressed);
}

}  // namespace

boost::asio::awaitable<RemoteTokensReport> fetchRemoteTokens(Gateway& gateway, const routing::RoutePlan& plan,
                                                             const routing::RouteQuery& query,
                                                             openai::RequestView& request,
                                                             tokenize::ConnectionPool* pool) {
  request.remote_tokens = RemoteTokens::kNone;
  request.remote_token_ids.reset();
  RemoteTokensReport report;
  tokenize::RemoteTokenizer* tokenizer = gateway.remoteTokenizer();
  // Token ids in the prompt are already the engine's: nothing to ask.
  if (!tokenizer || request.has_token_ids) co_return report;
  if (!plan.wantsPromptTokens()) co_return report;
  // A model no pod serves is refused by the router (404): asking a tokenizer is wasted, and counting the failure by
  // the client's model name (aibrix_prefix_cache_routing_errors_total) would add series for every made-up name.
  if (gateway.pods().snapshot()->podsFor(request.model) == nullptr) co_return report;
  const tokenize::TokenizeInput input{request.model, request.endpoint == openai::Endpoint::kChatCompletions,
                                      request.raw_messages, request.raw_tools, request.raw_prompt};
  tokenize::TokenizeResult result = co_await tokenizer->tokenize(input, pool);
  report.outcome = tokenize::outcomeLabel(result.outcome);
  if (result.engine != engine::EngineKind::kAuto) report.engine = engine::engineKindName(result.engine);
  report.engine_assumed = result.engine_assumed;
  if (result.ok()) {
    request.remote_tokens = RemoteTokens::kOk;
    request.remote_token_ids = std::move(result.tokens);
  } else {
    request.remote_tokens = RemoteTokens::kFailed;
  }
  if (query.dry_run) co_return report;
  gateway.metrics().remoteTokenizer(report.outcome, result.seconds);
  if (!request.remote_token_ids) {
    gateway.prefixMetrics().error(request.model, "tokenize_failed");
    warnThrottled(request, result);
  }
  co_return report;
}

std::string_view tokensSource(const openai::RequestView& request) {
  switch (request.remote_tokens) {
    case RemoteTokens::kOk: return "remote";
    case RemoteTokens::kFailed: return "remote_failed";
    case RemoteTokens::kNone: return "local";
  }
  return "local";
}

}  // namespace prefixgate::server
