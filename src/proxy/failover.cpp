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

std::string_view failureLabel(FailureKind kind) {
  switch (kind) {
    case FailureKind::kNone: return "none";
    case FailureKind::kConnect: return "connect";
    case FailureKind::kConnectTimeout: return "connect_timeout";
    case FailureKind::kLocal: return "local";
    case FailureKind::kClosedBeforeResponse: return "closed";
    case FailureKind::kBadResponse: return "bad_response";
    case FailureKind::kEngineError: return "engine_error";
    case FailureKind::kResponseHeaderTimeout: return "response_header_timeout";
    case FailureKind::kIdleTimeout: return "idle_timeout";
    case FailureKind::kInterrupted: return "interrupted";
    case FailureKind::kResponseTooLarge: return "response_too_large";
    case FailureKind::kClientGone: return "client_gone";
  }
  return "unknown";
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

void reportHealth(std::span<const Attempt> attempts, std::string_view request_body, HealthSink& sink) {
  std::vector<discovery::PodState*> suspects;
  for (size_t i = 0; i < attempts.size(); ++i) {
    const Attempt& a = attempts[i];
    if (retriedFresh(attempts, i)) continue;
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

uint64_t requestHash(std::string_view body) { return std::hash<std::string_view>{}(body); }

}  // namespace prefixgate::proxy
