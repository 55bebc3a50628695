#pragma once
// The prediction audit: for a successful response whose engine reported usage.prompt_tokens and
// usage.prompt_tokens_details.cached_tokens, and whose routing decision carried a prediction (prefix strategies
// set Decision::predicted_cached_fraction), the tokens the router predicted as cached on the chosen pod against
// the tokens the engine says it found cached. Pure: routing::Ticket records the result in the pod's
// PredictionTotals and in the prefixgate_prefix_* series.
#include <cstdint>
#include <optional>

namespace prefixgate::routing {

struct PredictionAudit {
  uint64_t prompt_tokens = 0;         // as the engine counted them
  uint64_t predicted_tokens = 0;      // round(predicted fraction x prompt_tokens): the prediction in engine tokens
  uint64_t engine_cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
  double error_ratio = 0;             // (predicted - engine) / prompt_tokens; > 0 over-predicted; 0 for no prompt

  // One response's audit; empty when there is nothing to compare: no prediction (NaN or a negative fraction) or
  // a number the engine did not report. A fraction above 1 counts as 1.
  static std::optional<PredictionAudit> compare(double predicted_fraction, std::optional<uint64_t> prompt_tokens,
                                                std::optional<uint64_t> cached_tokens);
};

}  // namespace prefixgate::routing
