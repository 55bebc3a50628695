#pragma once
// What routing learns and counts about one pod: this gateway's requests in flight to it (and their prompt and
// prefill tokens), the other replicas' count with state sync, its time to first byte, its service rates and its
// prediction audit. Routing owns the type and every read and write; discovery::PodState holds one per pod for the
// pod's life, so the signals survive a pods-file reload or edit that keeps the pod. Includes std headers and
// routing/service_rates.h (std only) and nothing else: discovery/pod_set.h includes it.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "routing/service_rates.h"

namespace prefixgate::routing {

// The prediction audit of one pod (routing/prediction_audit.h): what prefix strategies predicted it held in its KV
// cache against what its engine reported, summed over the audited responses. Request threads add, /debug/pods
// reads; each sum is its own atomic, so a read during an add may see part of it (never a torn number).
class PredictionTotals {
 public:
  struct Sums {
    uint64_t responses = 0;
    uint64_t predicted_tokens = 0;
    uint64_t engine_cached_tokens = 0;
    uint64_t over_predicted_tokens = 0;   // sum of max(predicted - engine, 0)
    uint64_t under_predicted_tokens = 0;  // sum of max(engine - predicted, 0)
    // 1 - sum|predicted - engine| / sum max(predicted, engine); empty before any audited response; 1 when both
    // sides were always 0. (sum max(p, e) = engine + over.)
    std::optional<double> accuracy() const {
      if (responses == 0) return std::nullopt;
      const double base = static_cast<double>(engine_cached_tokens + over_predicted_tokens);
      if (base == 0) return 1.0;
      return 1.0 - static_cast<double>(over_predicted_tokens + under_predicted_tokens) / base;
    }
  };
  void add(uint64_t predicted_tokens, uint64_t engine_cached_tokens) {
    responses_.fetch_add(1, std::memory_order_relaxed);
    predicted_.fetch_add(predicted_tokens, std::memory_order_relaxed);
    engine_.fetch_add(engine_cached_tokens, std::memory_order_relaxed);
    if (predicted_tokens > engine_cached_tokens)
      over_.fetch_add(predicted_tokens - engine_cached_tokens, std::memory_order_relaxed);
    else
      under_.fetch_add(engine_cached_tokens - predicted_tokens, std::memory_order_relaxed);
  }
  Sums sums() const {
    return {responses_.load(std::memory_order_relaxed), predicted_.load(std::memory_order_relaxed),
            engine_.load(std::memory_order_relaxed), over_.load(std::memory_order_relaxed),
            under_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<uint64_t> responses_{0};
  std::atomic<uint64_t> predicted_{0};
  std::atomic<uint64_t> engine_{0};
  std::atomic<uint64_t> over_{0};
  std::atomic<uint64_t> under_{0};
};

// Time to first byte of one pod as the gateway measured it (request start to the engine's first response byte),
// for least-latency: an EWMA (each sample weighs kWeight against the past), with the time of the last sample.
// Every response adds one sample, whatever the strategy, so it takes no lock: the EWMA is updated by compare and
// swap (concurrent samples each land once), and a reader that sees samples > 0 sees the EWMA they were folded into.
class LatencyEstimate {
 public:
  struct Sample {
    double seconds = 0;     // the EWMA; meaningless when samples == 0
    int64_t last_ms = 0;    // steady clock, when the last sample was added
    uint64_t samples = 0;
  };
  static constexpr double kWeight = 0.2;  // the last ~5 responses dominate
  void add(double seconds, int64_t now_ms) {
    double old = seconds_.load(std::memory_order_relaxed);
    while (!seconds_.compare_exchange_weak(old, std::isnan(old) ? seconds : kWeight * seconds + (1 - kWeight) * old,
                                           std::memory_order_relaxed)) {
    }
    last_ms_.store(now_ms, std::memory_order_relaxed);
    samples_.fetch_add(1, std::memory_order_release);
  }
  Sample read() const {
    const uint64_t samples = samples_.load(std::memory_order_acquire);
    return {seconds_.load(std::memory_order_relaxed), last_ms_.load(std::memory_order_relaxed), samples};
  }

 private:
  std::atomic<double> seconds_{std::numeric_limits<double>::quiet_NaN()};  // NaN until the first sample
  std::atomic<int64_t> last_ms_{0};
  std::atomic<uint64_t> samples_{0};
};


// The signals of one pod. Every member is its own atomic (or, for ServiceRates, updated under its own mutex):
// request threads, the relay and state sync write them concurrently, strategies read them without a lock.
class PodSignals {
 public:
  int32_t inFlight() const { return in_flight_.load(std::memory_order_relaxed); }
  // `tokens`: the request's prompt tokens (its context), summed in inFlightTokens while it is in flight.
  void addInFlight(int64_t tokens = 0) {
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    routed_.fetch_add(1, std::memory_order_relaxed);
    if (tokens != 0) in_flight_tokens_.fetch_add(tokens, std::memory_order_relaxed);
  }
  // The per-pod bound taken, not just read (limits.max_in_flight_per_pod): counts one more request in flight only
  // while inFlightAllReplicas() is below `limit`, in one compare-and-swap, so two request threads that both read the
  // last free slot cannot both take it. False, counting nothing, when the pod is full. Its tokens are added apart
  // (addInFlightTokens) once known; the guard that releases it is built with InFlightGuard::kCounted.
  bool tryAddInFlight(int32_t limit) {
    int32_t seen = in_flight_.load(std::memory_order_relaxed);
    do {
      if (seen + beyondLocal() >= limit) return false;
    } while (!in_flight_.compare_exchange_weak(seen, seen + 1, std::memory_order_relaxed));
    routed_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void addInFlightTokens(int64_t tokens) { in_flight_tokens_.fetch_add(tokens, std::memory_order_relaxed); }
  void releaseInFlight(int64_t tokens = 0) {
    in_flight_.fetch_sub(1, std::memory_order_relaxed);
    if (tokens != 0) in_flight_tokens_.fetch_sub(tokens, std::memory_order_relaxed);
  }
  // The prompt tokens of this gateway's requests in flight to the pod (prefill-cost's decode term).
  int64_t inFlightTokens() const { return in_flight_tokens_.load(std::memory_order_relaxed); }
  // This gateway's requests sent to the pod whose first response byte has not come yet (the engine is queueing or
  // prefilling them), and the prompt tokens they were predicted to miss in its cache: the prefill work ahead of
  // the next request (PrefillGuard counts them).
  int32_t prefillRequests() const { return prefill_requests_.load(std::memory_order_relaxed); }
  int64_t prefillTokens() const { return prefill_tokens_.load(std::memory_order_relaxed); }
  void addPrefill(int64_t tokens) {
    prefill_requests_.fetch_add(1, std::memory_order_relaxed);
    prefill_tokens_.fetch_add(tokens, std::memory_order_relaxed);
  }
  void releasePrefill(int64_t tokens) {
    prefill_requests_.fetch_sub(1, std::memory_order_relaxed);
    prefill_tokens_.fetch_sub(tokens, std::memory_order_relaxed);
  }
  // With state sync: the other live replicas' in-flight requests to this pod as last read from Redis (0 when sync
  // is off, or Redis has not answered for longer than a replica's heartbeat lives), and how many other replicas
  // there were. The read is up to one load interval old; setRemoteInFlight notes this gateway's routed count then.
  int32_t remoteInFlight() const { return remote_in_flight_.load(std::memory_order_relaxed); }
  void setRemoteInFlight(int32_t n, int32_t other_replicas) {
    routed_at_read_.store(routed_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    other_replicas_.store(other_replicas, std::memory_order_relaxed);
    remote_in_flight_.store(n, std::memory_order_relaxed);
  }
  // What routing weighs: this gateway's count (exact, counted at the moment of choice) plus the others' as last
  // read, plus, for each other replica, as many requests as this one has sent the pod since that read. Replicas
  // deciding on the same old view tend to make the same choices (and pile onto the pod that looked idle to all):
  // assuming each did what this one did since the read spreads them as if the view were current (symmetric
  // replicas behind one Service get alike traffic). Without sync it is the local count.
  int32_t inFlightAllReplicas() const { return inFlight() + beyondLocal(); }

  // Time to first byte as measured by the gateway (least-latency reads it).
  LatencyEstimate& latency() { return latency_; }
  const LatencyEstimate& latency() const { return latency_; }
  // How long it served this gateway's successful responses (the attempt's start to the response's end), an EWMA.
  LatencyEstimate& service() { return service_; }
  const LatencyEstimate& service() const { return service_; }
  // How long its successful streamed responses ran from their first token to their end (the decode), an EWMA.
  LatencyEstimate& decode() { return decode_; }
  const LatencyEstimate& decode() const { return decode_; }
  // Prefill and decode rates learned from its responses (the wait scorer's inputs; RequestOutcome adds).
  ServiceRates& rates() { return rates_; }
  const ServiceRates& rates() const { return rates_; }
  // The prediction audit's sums for this pod (kept across pods-file reloads, like the in-flight count).
  PredictionTotals& prediction() { return prediction_; }
  const PredictionTotals& prediction() const { return prediction_; }

 private:
  // inFlightAllReplicas() less this gateway's own count: the other replicas' as last read, plus the estimate of
  // what they sent since (one per request this gateway routed since the read, per other replica).
  int32_t beyondLocal() const {
    const int32_t others = other_replicas_.load(std::memory_order_relaxed);
    const auto since = static_cast<int32_t>(routed_.load(std::memory_order_relaxed) -
                                            routed_at_read_.load(std::memory_order_relaxed));
    return remoteInFlight() + others * since;
  }

  std::atomic<int32_t> in_flight_{0};
  std::atomic<int64_t> in_flight_tokens_{0};
  std::atomic<int32_t> prefill_requests_{0};
  std::atomic<int64_t> prefill_tokens_{0};
  std::atomic<int32_t> remote_in_flight_{0};
  std::atomic<uint32_t> routed_{0};          // requests ever routed here by this gateway (wraps)
  std::atomic<uint32_t> routed_at_read_{0};  // routed_ when the other replicas' counts were last read
  std::atomic<int32_t> other_replicas_{0};
  PredictionTotals prediction_;
  LatencyEstimate latency_;
  LatencyEstimate service_;
  LatencyEstimate decode_;
  ServiceRates rates_;
};

}  // namespace prefixgate::routing
