#include "routing/prediction_audit.h"

#include <algorithm>
#include <cmath>

namespace prefixgate::routing {

std::optional<PredictionAudit> PredictionAudit::compare(double predicted_fraction,
                                                        std::optional<uint64_t> prompt_tokens,
                                                        std::optional<uint64_t> cached_tokens) {
  if (std::isnan(predicted_fraction) || predicted_fraction < 0 || !prompt_tokens || !cached_tokens) return std::nullopt;
  PredictionAudit a;
  a.prompt_tokens = *prompt_tokens;
  a.engine_cached_tokens = *cached_tokens;
  const double fraction = std::min(predicted_fraction, 1.0);
  a.predicted_tokens = static_cast<uint64_t>(std::llround(fraction * static_cast<double>(a.prompt_tokens)));
  if (a.prompt_tokens > 0)
    a.error_ratio = (static_cast<double>(a.predicted_tokens) - static_cast<double>(a.engine_cached_tokens)) /
                    static_cast<double>(a.prompt_tokens);
  return a;
}

}  // namespace prefixgate::routing
