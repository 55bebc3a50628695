#include "proxy/failover.h"

#include <algorithm>
#include <functional>
#include <vector>

namespace prefixgate::proxy {

namespace {

// Failures that end an exchange before any response byte and that a stale pooled connection also produces.
bool staleConnectionSymptom(FailureKind kind) {
  return kind == FailureKind::kClosedBeforeResponse || kind == FailureKind::kBadResponse;
}

// Failures after which another pod may serve the request.
bool switchable(FailureKind kind) {
  switch (kind) {
    case FailureKind::kConnect:
    case FailureKind::kConnectTimeout:
    case FailureKind::kClosedBeforeResponse:
    case FailureKind::kBadResponse:
    case FailureKind::kEngineError: return true;
    default: return false;
  }
}

// An attempt on a reused connection that was retried fresh on the same pod: the connection was stale.
bool retriedFresh(std::span<const Attempt> attempts, size_t i) {
  const Attempt& a = attempts[i];
  return a.reused_connection && staleConnectionSymptom(a.failure) && i + 1 < attempts.size() &&
         attempts[i + 1].pod == a.pod && !attempts[i + 1].reused_connection;
}

}  // namespace

openai::GatewayError errorFor(FailureKind kind) {
  using E = openai::GatewayError;
  switch (kind) {
    case FailureKind::kConnect: return E::kUpstreamConnect;
    case FailureKind::kConnectTimeout: return E::kUpstreamConnectTimeout;
    case FailureKind::kLocal: return E::kGatewayResources;
    case FailureKind::kClosedBeforeResponse: return E::kUpstreamClosed;
    case FailureKind::kBadResponse: return E::kUpstreamBadResponse;
    case FailureKind::kEngineError: return E::kUpstreamEngineError;
    case FailureKind::kResponseHeaderTimeout: return E::kUpstreamHeaderTimeout;
    case FailureKind::kIdleTimeout: return E::kUpstreamIdleTimeout;
    case FailureKind::kInterrupted: return E::kUpstreamInterrupted;
    case FailureKind::kResponseTooLarge: return E::kUpstreamResponseTooLarge;
    case FailureKind::kClientGone:
    case FailureKind::kNone: break;
  }
  return E::kClientGone;
}

std::string_view failureLabel(FailureKind kind) {
  return kind == FailureKind::kNone ? "none" : openai::errorInfo(errorFor(kind)).label;
}

Blame blameOf(FailureKind kind) {
  switch (kind) {
    case FailureKind::kConnect:
    case FailureKind::kConnectTimeout:
    case FailureKind::kResponseHeaderTimeout:
    case FailureKind::kIdleTimeout: return Blame::kPod;
    case FailureKind::kClosedBeforeResponse:
    case FailureKind::kBadResponse:
    case FailureKind::kEngineError:
    case FailureKind::kInterrupted: return Blame::kSuspect;
    default: return Blame::kNone;
  }
}

NextStep nextStep(std::span<const Attempt> attempts, uint32_t max_retries) {
  const Attempt& last = attempts.back();
  if (last.failure == FailureKind::kNone) return NextStep::kRelay;
  if (last.response_started) return NextStep::kGiveUp;
  if (last.reused_connection && staleConnectionSymptom(last.failure)) return NextStep::kRetryFresh;
  if (!switchable(last.failure)) return NextStep::kGiveUp;
  uint32_t switches = 0;
  for (size_t i = 1; i < attempts.size(); ++i)
    if (attempts[i].pod != attempts[i - 1].pod) ++switches;
  return switches < max_retries ? NextStep::kSwitchPod : NextStep::kGiveUp;
}

void reportPodFailure(Attempt& attempt, HealthSink& sink) {
  if (attempt.reported || blameOf(attempt.failure) != Blame::kPod) return;
  sink.podFailed(*attempt.pod);
  attempt.reported = true;
}

void reportHealth(std::span<const Attempt> attempts, std::string_view request_body, HealthSink& sink) {
  std::vector<discovery::PodState*> suspects;
  for (size_t i = 0; i < attempts.size(); ++i) {
    const Attempt& a = attempts[i];
    if (a.reported || retriedFresh(attempts, i)) continue;
    if (a.failure == FailureKind::kNone) sink.succeeded(*a.pod);
    else if (blameOf(a.failure) == Blame::kPod) sink.podFailed(*a.pod);
    else if (blameOf(a.failure) == Blame::kSuspect &&
             std::find(suspects.begin(), suspects.end(), a.pod) == suspects.end())
      suspects.push_back(a.pod);
  }
  // The same request failing on two pods points at the request, not at either pod.
  if (suspects.size() != 1) return;
  sink.requestFailed(*suspects.front(), requestHash(request_body));
}

routing::AttemptFailure attemptFailureOf(FailureKind kind) {
  switch (kind) {
    case FailureKind::kConnect:
    case FailureKind::kConnectTimeout:
    case FailureKind::kLocal:
    case FailureKind::kClosedBeforeResponse:
    case FailureKind::kEngineError: return routing::AttemptFailure::kNotComputed;
    default: return routing::AttemptFailure::kMaybeComputed;
  }
}

uint64_t requestHash(std::string_view body) { return std::hash<std::string_view>{}(body); }

}  // namespace prefixgate::proxy
