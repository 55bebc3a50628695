#include "server/request_outcome.h"

#include <fmt/format.h>

#include <optional>
#include <random>

#include "config/random_seed.h"
#include "routing/prefix/prefix_services.h"
#include "server/gateway.h"
#include "util/log.h"

namespace prefixgate::server {
namespace http = boost::beast::http;

namespace {
// Per thread, so that id generation takes no lock; empty until seeded or first used.
thread_local std::optional<std::mt19937_64> request_id_rng;
}  // namespace

void seedRequestIds(uint64_t seed) { request_id_rng.emplace(seed); }

std::string newRequestId() {
  if (!request_id_rng) request_id_rng.emplace(config::streamSeed(0, config::SeedPurpose::kRequestId));
  std::mt19937_64& rng = *request_id_rng;
  const uint64_t high = rng();
  return fmt::format("{:016x}{:016x}", high, rng());
}

namespace {
// A client-given id is kept only when it is short and printable, so it is safe in logs and headers.
bool usableId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (c <= ' ' || c > '~') return false;
  return true;
}
}  // namespace

void RequestOutcome::begin(const proxy::ClientHead& head) {
  begun_ = true;
  start_ = std::chrono::steady_clock::now();
  std::string_view given = head["x-request-id"];
  request_id_ = usableId(given) ? std::string(given) : newRequestId();
  method_ = std::string(head.method_string());
  path_ = std::string(head.target().substr(0, head.target().find('?')));
  gateway_.activeRequests().fetch_add(1);
}

void RequestOutcome::setRequest(const openai::RequestView& request) {
  model_ = request.model;
  stream_ = request.stream;
}

void RequestOutcome::setDecision(const routing::Decision& decision, const proxy::RelayOutcome& relayed) {
  strategy_ = decision.strategy;
  pod_ = decision.pod ? decision.pod->name() : "";
  match_percent_ = decision.match_percent;
  status_ = relayed.status;
  first_byte_seconds_ = relayed.first_byte_seconds;
  // The pod's time to first byte, for least-latency: answers the engine gave (not a failure's 5xx).
  if (decision.pod && relayed.first_byte_seconds >= 0 && relayed.status > 0 && relayed.status < 500)
    decision.pod->latency().add(relayed.first_byte_seconds, routing::steadyNowMs());
  // The pod's service rates (the wait scorer's): a streamed 200's first token (its first body byte; a non-streamed
  // answer's first byte comes after its whole decode) against the work the pod had when the request was sent; its
  // own tokens as the engine reported them (prompt - cached) when the usage says.
  if (decision.pod && relayed.status == 200 && stream_ && relayed.first_body_seconds >= 0) {
    double own = decision.sent.own_tokens;
    if (relayed.prompt_tokens && relayed.cached_tokens && *relayed.cached_tokens <= *relayed.prompt_tokens)
      own = static_cast<double>(*relayed.prompt_tokens - *relayed.cached_tokens);
    decision.pod->rates().add(own, decision.sent.prefill_ahead_tokens, decision.sent.decoding,
                              relayed.first_body_seconds);
  }
  retries_ = relayed.retries;
  stale_retries_ = relayed.stale_retries;
  output_tokens_ = relayed.output_tokens;
  engine_cached_tokens_ = relayed.cached_tokens;
  // The model's bytes per engine token: the hashed prompt's size against the engine's count of it.
  if (relayed.status == 200 && decision.encoded_prompt_bytes > 0 && relayed.prompt_tokens)
    gateway_.prefixServices().bytesPerToken().add(model_, static_cast<uint64_t>(decision.encoded_prompt_bytes),
                                                   *relayed.prompt_tokens);
  if (relayed.status == 200 && decision.pod && relayed.prompt_tokens && relayed.cached_tokens)
    noteSlotCacheEvidence(*decision.pod, decision, *relayed.prompt_tokens, *relayed.cached_tokens);
  // Only a 200 whose usage gave both numbers, for a decision that carried a prediction (prefix strategies).
  if (relayed.status == 200 && decision.pod) {
    audit_ = PredictionAudit::compare(decision.predicted_cached_fraction, relayed.prompt_tokens, relayed.cached_tokens);
    if (audit_) audited_pod_ = decision.pod;
  }
  if (!relayed.error.empty()) {
    reason_ = relayed.error_reason;
    message_ = relayed.error;
  }
}

void RequestOutcome::fail(openai::GatewayError error, std::string message) {
  const openai::ErrorInfo& info = openai::errorInfo(error);
  status_ = info.status;
  reason_ = std::string(info.label);
  message_ = std::move(message);
}

// What a llama.cpp pod keeps beyond its slots is learned from its answers (EngineLoad::SlotCache): a response that
// served more cached tokens than any of its slots held of the prompt when it was routed votes for a host prompt
// cache; one that served no more than its slots held where the gateway's routing history promised more votes for
// slots only. (A wrong guess of which slot a prompt took, or whether a slot was busy, never votes: the slots'
// content counts whether busy or not.)
void RequestOutcome::noteSlotCacheEvidence(discovery::PodState& pod, const routing::Decision& decision,
                                           uint64_t prompt_tokens, uint64_t cached_tokens) {
  if (routing::PrefixServices::modelledSlots(pod) == 0) return;
  // (Once slots only was decided, predictions are bounded by the slots: only hits beyond them still tell.)
  const std::optional<bool> host =
      slotCacheEvidence(decision.slot_held_fraction, decision.predicted_cached_fraction, prompt_tokens, cached_tokens);
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

RequestOutcome::~RequestOutcome() {
  if (!begun_) {
    if (status_ != 0)  // failed before a complete head
      log::info("request status={} reason={} error=\"{}\"", status_, reason_, openai::printable(message_));
    return;
  }
  gateway_.activeRequests().fetch_sub(1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  // Metric labels come only from bounded sets: a model label only for a model some pod serves (any other name a
  // client sends is "unknown", so made-up names cannot grow the series), strategies only from decisions (known
  // names), pods from discovery.
  static const std::string kUnknownModel = "unknown";
  const bool served = !pod_.empty() || (!model_.empty() && gateway_.pods().snapshot()->podsFor(model_) != nullptr);
  const std::string& model = model_.empty() ? model_ : (served ? model_ : kUnknownModel);
  gateway_.metrics().requestDone(model, pod_, status_, strategy_, seconds);
  if (first_byte_seconds_ >= 0) gateway_.metrics().firstByte(model, first_byte_seconds_);
  if (!reason_.empty() && !pod_.empty() && status_ >= 500) gateway_.metrics().upstreamError(pod_, reason_);
  if (retries_ > 0) gateway_.metrics().retried(reason_.empty() ? "recovered" : reason_);
  if (audit_) {
    audited_pod_->prediction().add(audit_->predicted_tokens, audit_->engine_cached_tokens);
    gateway_.metrics().predictionAudited(pod_, audit_->predicted_tokens, audit_->engine_cached_tokens,
                                         audit_->error_ratio);
  }
  if (!log::enabled(status_ >= 500 && status_ != 499 ? log::Level::kWarn : log::Level::kInfo)) return;
  // Client-given text (method, path, model, messages quoting them) is cut and escaped: one request, one line.
  std::string line = fmt::format("request id={} {} {} model={} strategy={} pod={} match={} status={} latency_ms={:.1f}",
                                 request_id_, openai::printable(method_, 32), openai::printable(path_, 256),
                                 model_.empty() ? "-" : openai::printable(model_, 128),
                                 strategy_.empty() ? "-" : strategy_, pod_.empty() ? "-" : pod_,
                                 match_percent_ >= 0 ? std::to_string(match_percent_) : "-", status_, seconds * 1000);
  if (first_byte_seconds_ >= 0) line += fmt::format(" ttfb_ms={:.1f}", first_byte_seconds_ * 1000);
  if (output_tokens_ > 0) line += fmt::format(" output_tokens={}", output_tokens_);
  if (engine_cached_tokens_) line += fmt::format(" cached_tokens={}", *engine_cached_tokens_);
  if (audit_) line += fmt::format(" predicted_cached_tokens={}", audit_->predicted_tokens);
  if (!key_.empty()) line += " key=" + key_;
  if (stream_) line += " stream=true";
  if (retries_ > 0) line += fmt::format(" retries={}", retries_);
  if (stale_retries_ > 0) line += fmt::format(" stale_connection_retries={}", stale_retries_);
  if (!reason_.empty() && status_ >= 400) line += " reason=" + reason_;
  if (!message_.empty()) line += " error=\"" + openai::printable(message_, 512) + "\"";
  if (status_ >= 500 && status_ != 499) log::warn("{}", line);
  else log::info("{}", line);
}

}  // namespace prefixgate::server
