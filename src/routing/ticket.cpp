#include "routing/ticket.h"

#include <algorithm>

#include "routing/prefix/prefix_services.h"
#include "util/log.h"

namespace prefixgate::routing {

void SlotTurn::ready() {
  std::function<void()> run;
  {
    std::lock_guard lock(mutex_);
    if (ready_) return;
    ready_ = true;
    run = std::move(on_ready_);
  }
  if (run) run();
}

bool SlotTurn::whenReady(std::function<void()> on_ready) {
  std::lock_guard lock(mutex_);
  if (ready_) return true;
  on_ready_ = std::move(on_ready);
  return false;
}

void SlotTurn::cancel() {
  std::lock_guard lock(mutex_);
  on_ready_ = nullptr;
}

void Ticket::firstByte() {
  if (!pod_) return;
  pending_.reset();
  prefill_.reset();
  if (strategy_) strategy_->onFirstByte(*pod_);
}

void Ticket::attemptFailed(AttemptFailure kind) {
  if (!pod_) return;
  pending_.reset();
  prefill_.reset();
  if (kind == AttemptFailure::kNotComputed) {
    // The pod never computed the prompt: what this decision recorded for it beyond the blocks it was predicted to
    // hold already is not there, here nor on the other replicas state sync shared the record with.
    if (prefix_ && prompt_) prefix_->withdrawRouted(facts_.model, prompt_->prompt.hashes, facts_.held_blocks, *pod_);
    held_until_end_.reset();
  }
  if (strategy_) strategy_->onAttemptFailed(*pod_);
}

std::optional<PredictionAudit> Ticket::completed(const Completion& c) {
  if (!pod_) return std::nullopt;
  discovery::PodState& pod = *pod_;
  PodSignals& signals = pod.signals();
  const int64_t now = (*now_ms_)();
  // The pod's time to first byte, for least-latency: answers the engine gave (not a failure's 5xx).
  if (c.first_byte_seconds >= 0 && c.status > 0 && c.status < 500) signals.latency().add(c.first_byte_seconds, now);
  // How long it serves a request (a slot waited for frees after about that long).
  if (c.end_seconds >= 0 && c.status == 200) signals.service().add(c.end_seconds, now);
  // How long its decode takes (a slot's request is expected to take its prefill and that).
  if (facts_.stream && c.status == 200 && c.first_body_seconds >= 0 && c.end_seconds >= c.first_body_seconds)
    signals.decode().add(c.end_seconds - c.first_body_seconds, now);
  std::optional<PredictionAudit> audit;
  if (c.status == 200) {
    // The pod's service rates (the wait scorer's): a streamed answer's first token (its first body byte; a
    // non-streamed answer's first byte comes after its whole decode) against the work the pod had when the request
    // was sent; its own tokens as the engine reported them (prompt - cached) when the usage says.
    if (facts_.stream && c.first_body_seconds >= 0) {
      double own = facts_.sent.own_tokens;
      if (c.prompt_tokens && c.cached_tokens && *c.cached_tokens <= *c.prompt_tokens)
        own = static_cast<double>(*c.prompt_tokens - *c.cached_tokens);
      // The model's pooled rates stand in for pods without enough of their own: only those pods' streams feed it,
      // so a fleet that has learned takes no per-model lock per response.
      const bool learning = signals.rates().read().samples < PrefixServices::kOwnRatesSamples;
      signals.rates().add(own, facts_.sent.prefill_ahead_tokens, facts_.sent.decoding, c.first_body_seconds);
      if (prefix_ && learning)
        prefix_->modelRates().add(facts_.model, own, facts_.sent.prefill_ahead_tokens, facts_.sent.decoding,
                                  c.first_body_seconds);
    }
    // The pod's measured capacity (output tokens/s) counts every token it produced for a successful response.
    if (c.output_tokens > 0) pod.engine().addOutputTokens(c.output_tokens, now);
    // A completed request makes its engine publish the blocks it stored: KV event sync watches for silence.
    pod.kvSync().noteCompleted(now);
    if (prefix_ && c.prompt_tokens) {
      // The model's bytes per engine token: the hashed prompt's size against the engine's count of it.
      if (facts_.encoded_prompt_bytes > 0)
        prefix_->bytesPerToken().add(facts_.model, static_cast<uint64_t>(facts_.encoded_prompt_bytes),
                                     *c.prompt_tokens);
      if (c.cached_tokens) noteSlotCacheEvidence(*c.prompt_tokens, *c.cached_tokens);
    }
    // Only a 200 whose usage gave both numbers, for a decision that carried a prediction (prefix strategies).
    audit = PredictionAudit::compare(facts_.predicted_cached_fraction, c.prompt_tokens, c.cached_tokens);
    if (audit) signals.prediction().add(audit->predicted_tokens, audit->engine_cached_tokens);
  }
  if (strategy_) strategy_->onCompleted(pod, c);
  return audit;
}

// What a llama.cpp pod keeps beyond its slots is learned from its answers (EngineLoad::SlotCache): a response that
// served more cached tokens than any of its slots held of the prompt when it was routed votes for a host prompt
// cache; one that served no more than its slots held where the gateway's routing history promised more votes for
// slots only. (A wrong guess of which slot a prompt took, or whether a slot was busy, never votes: the slots'
// content counts whether busy or not.)
void Ticket::noteSlotCacheEvidence(uint64_t prompt_tokens, uint64_t cached_tokens) {
  discovery::PodState& pod = *pod_;
  if (PrefixServices::modelledSlots(pod) == 0) return;
  // (Once slots only was decided, predictions are bounded by the slots: only hits beyond them still tell.)
  const std::optional<bool> host =
      slotCacheEvidence(facts_.slot_held_fraction, facts_.predicted_cached_fraction, prompt_tokens, cached_tokens);
  if (!host) return;
  const auto decided = pod.engine().voteSlotCache(*host);
  if (!decided) return;
  if (*decided == engine::EngineLoad::SlotCache::kHostCache)
    log::info("pod {}: llama.cpp served cached prompts its {} slots did not hold: it has a host prompt cache "
              "(--cache-ram); its hits are predicted from routing history (set kv_capacity_tokens to bound them)",
              pod.name(), pod.engine().slots());
  else
    log::info("pod {}: llama.cpp served no more than its {} slots held where routing history promised more: it "
              "keeps no host prompt cache (--cache-ram 0); its hits are now predicted from its slots",
              pod.name(), pod.engine().slots());
}

std::optional<bool> slotCacheEvidence(double slot_held_fraction, double predicted_fraction, uint64_t prompt_tokens,
                                      uint64_t cached_tokens) {
  if (!(slot_held_fraction >= 0) || prompt_tokens == 0) return std::nullopt;
  const double prompt = static_cast<double>(prompt_tokens);
  const double held = std::min(1.0, slot_held_fraction) * prompt;
  const double margin = std::max(kSlotCacheMarginTokens, prompt / 10);
  if (static_cast<double>(cached_tokens) > held + margin) return true;
  const double promised = predicted_fraction >= 0 ? std::min(1.0, predicted_fraction) * prompt : 0;
  if (promised > held + margin && static_cast<double>(cached_tokens) <= held + margin) return false;
  return std::nullopt;
}

}  // namespace prefixgate::routing
