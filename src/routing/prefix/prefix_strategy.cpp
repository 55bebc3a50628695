#include "routing/prefix/prefix_strategy.h"

#include <cmath>

#include "util/scratch.h"

namespace prefixgate::routing {

PrefixStrategy::Match& PrefixStrategy::current() {
  thread_local Match m;
  return m;
}

PrefixStrategy::Match& PrefixStrategy::hashAndMatch(RoutingInput& input) {
  Match& m = current();
  m.started = std::chrono::steady_clock::now();
  util::releaseIfLarge(m.prompt.hashes);  // a huge previous prompt's hashes are not kept for ever
  services_.hashPrompt(input.request, m.prompt, input.candidates);
  m.matched.assign(input.candidates.size(), 0);
  services_.match(input.request.model, m.prompt, input.candidates, m.pods, m.matched);
  if (m.prompt.usable) {
    input.prompt_tokens = static_cast<int64_t>(m.prompt.engine_tokens);
    input.encoded_prompt_bytes = static_cast<int64_t>(m.prompt.bytes);
  }
  input.details = {{"tokens", static_cast<int64_t>(m.prompt.tokens)},
                   {"engine_tokens", static_cast<int64_t>(m.prompt.engine_tokens)},
                   {"blocks", static_cast<int64_t>(m.prompt.hashes.size())}};
  return m;
}

void PrefixStrategy::recordPick(RoutingInput& input, size_t chosen) {
  Match& m = current();
  // What the chosen pod is predicted to hold, for the prediction audit (computed against the engine's answer).
  if (m.prompt.usable) {
    input.predicted_cached_fraction = m.prompt.fraction(m.matched[chosen]);
    // What the pod will prefill (queued against it until the first token; the wait scorer's queue).
    const double tokens = static_cast<double>(m.prompt.engine_tokens);
    input.uncached_tokens = static_cast<int64_t>(std::lround(tokens * (1 - input.predicted_cached_fraction)));
  }
  if (input.dry_run) return;
  const Candidate& pick = input.candidates[chosen];
  // A slot engine: what its slots hold of the prompt before this request takes one (the host-cache evidence).
  if (m.prompt.usable)
    if (auto held = services_.slotHeldBlocks(input.request.model, m.prompt.hashes, *pick.pod))
      input.slot_held_fraction = m.prompt.fraction(*held);
  // Recorded before proxying, so the next request with the same prefix already follows this one.
  if (!m.prompt.hashes.empty() &&
      !services_.recordRouted(input.request.model, m.prompt.hashes, *pick.pod, true, &input.held_until_end))
    metrics_.error(input.request.model, "record_failed");
  // KV event mode: the blocks count for the pod until its engine begins the request (and publishes them).
  input.pending = services_.holdPending(input.request.model, m.prompt.hashes, pick.pod_id);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m.started).count();
  metrics_.decision(input.request.model, pick.match_percent, input.outcome, seconds);
}

}  // namespace prefixgate::routing
