// The shared state that request threads, discovery and the admin listener touch at once: the pod registry and
// the gateway's metrics. The ThreadSanitizer build runs these (every test named *Concurrent*, label `tsan`).
#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "discovery/pod_set.h"
#include "metrics/gateway_metrics.h"
#include "routing/load_guards.h"
#include "unit/core/pod_specs.h"

namespace prefixgate {
namespace {

using routing::InFlightGuard;
using discovery::PodRegistry;
using discovery::PodSpec;
using prefixgate::testing::podSpec;

constexpr int kReaders = 3;
constexpr int kUpdates = 300;
constexpr int kRecorders = 4;
constexpr int kRecordsPerThread = 2000;

// Ensures readers taking snapshots, counting requests in flight and recording health while the pod list is
// replaced over and over (a pod leaving, returning, changing address and edited in place) see a consistent set, and
// that every in-flight count returns to zero on its own pod state.
TEST(PodRegistryConcurrency, ConcurrentUpdatesAndReaders) {
  PodRegistry registry;
  const std::vector<PodSpec> all{podSpec("a", 1), podSpec("b", 2), podSpec("c", 3)};
  registry.update(all);
  std::atomic<bool> done{false};
  std::atomic<int> inconsistent{0};
  std::vector<discovery::PodPtr> seen[kReaders];
  config::HealthCheckConfig health;

  auto reader = [&](int r) {
    while (!done.load()) {
      auto snapshot = registry.snapshot();
      const auto* serving = snapshot->podsFor("m");
      if (!serving || serving->size() != snapshot->pods().size()) inconsistent.fetch_add(1);
      for (const auto& pod : snapshot->pods()) {
        InFlightGuard guard(pod);
        // A pod edited in place (b's capacity) is read while its spec is replaced.
        if (pod->spec().kv_capacity_tokens > 1'000'000 || pod->spec().address.empty()) inconsistent.fetch_add(1);
        // Passive health verdicts from every reader at once (the streak state is shared by all threads).
        if (r % 2) pod->recordRequestFailure(static_cast<uint64_t>(r), health);
        else pod->recordSuccess();
        if (seen[r].size() < 64) seen[r].push_back(pod);
      }
    }
  };
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) readers.emplace_back(reader, r);
  for (int i = 0; i < kUpdates; ++i) {
    switch (i % 3) {
      case 0: {
        PodSpec b = all[1];
        b.kv_capacity_tokens = static_cast<uint64_t>(i % 1000);  // an edit in place (while versions last)
        registry.update({all[0], b});
        break;
      }
      case 1: registry.update({all[0], all[1], podSpec("c", static_cast<uint16_t>(100 + i))}); break;
      default: registry.update(all); break;
    }
  }
  done.store(true);
  for (auto& t : readers) t.join();

  EXPECT_EQ(inconsistent.load(), 0);
  EXPECT_EQ(registry.snapshot()->pods().size(), 3u);
  for (const auto& pods : seen)
    for (const auto& pod : pods) EXPECT_EQ(pod->signals().inFlight(), 0) << pod->name();
}

// Sums the values of `name`'s samples in Prometheus text.
double sumOf(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  double sum = 0;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(name + "{", 0) == 0) sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

// Ensures request threads creating and incrementing series while the admin listener serializes lose no count.
TEST(GatewayMetricsConcurrency, ConcurrentRecordingAndSerialize) {
  metrics::GatewayMetrics metrics;
  PodRegistry registry;
  registry.update({podSpec("a", 1), podSpec("b", 2)});
  std::atomic<bool> done{false};

  auto recorder = [&](int t) {
    for (int i = 0; i < kRecordsPerThread; ++i) {
      const std::string pod = i % 2 ? "a" : "b";
      metrics.requestDone("m", pod, i % 5 ? 200 : 503, "least-request", 0.001 * (i % 7));
      metrics.firstByte("m", 0.001);
      if (i % 10 == 0) metrics.upstreamError(pod, "connect");
      if (i % 20 == 0) metrics.retried("connect");
    }
  };
  std::thread serializer([&] {
    while (!done.load()) metrics.serialize(*registry.snapshot(), 0);
  });
  std::vector<std::thread> recorders;
  for (int t = 0; t < kRecorders; ++t) recorders.emplace_back(recorder, t);
  for (auto& t : recorders) t.join();
  done.store(true);
  serializer.join();

  const std::string text = metrics.serialize(*registry.snapshot(), 0);
  EXPECT_EQ(sumOf(text, "prefixgate_requests_total"), kRecorders * kRecordsPerThread);
  EXPECT_EQ(sumOf(text, "prefixgate_upstream_errors_total"), kRecorders * kRecordsPerThread / 10);
}

// Ensures the per-thread shards of one series merge into one sample: counts and histogram observations of all
// threads add up under the same labels.
TEST(GatewayMetricsConcurrency, ShardsOfOneSeriesMergeAtScrape) {
  metrics::GatewayMetrics metrics;
  PodRegistry registry;
  std::vector<std::thread> recorders;
  for (int t = 0; t < kRecorders; ++t)
    recorders.emplace_back([&] {
      metrics.requestDone("m", "a", 200, "random", 0.002);
      metrics.firstByte("m", 0.5);
    });
  for (auto& t : recorders) t.join();
  const std::string text = metrics.serialize(*registry.snapshot(), 0);
  EXPECT_NE(text.find("prefixgate_requests_total{model=\"m\",pod=\"a\",status=\"200\",strategy=\"random\"} " +
                      std::to_string(kRecorders) + "\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(sumOf(text, "prefixgate_request_duration_seconds_count"), kRecorders);
  EXPECT_NEAR(sumOf(text, "prefixgate_request_duration_seconds_sum"), 0.002 * kRecorders, 1e-9);
  // 0.002 lies in the le="0.0025" bucket, not in le="0.001"; 0.5 in le="0.5".
  const std::string bucket = "prefixgate_request_duration_seconds_bucket{model=\"m\",pod=\"a\",status=\"200\",le=";
  EXPECT_NE(text.find(bucket + "\"0.0025\"} " + std::to_string(kRecorders)), std::string::npos);
  EXPECT_NE(text.find(bucket + "\"0.001\"} 0"), std::string::npos);
  const std::string first_byte = "prefixgate_time_to_first_byte_seconds_bucket{model=\"m\",le=\"0.5\"} ";
  EXPECT_NE(text.find(first_byte + std::to_string(kRecorders)), std::string::npos);
}

}  // namespace
}  // namespace prefixgate

namespace prefixgate {
namespace {

// Ensures the lock-free time-to-first-byte estimate loses no sample when responses on several threads add at once
// (each lands exactly once in the EWMA and the count), and that a reader that sees a sample count never sees the
// estimate before its first sample.
TEST(LatencyEstimateConcurrency, ConcurrentSamplesAndReaders) {
  routing::LatencyEstimate estimate;
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    while (!done.load()) {
      const routing::LatencyEstimate::Sample s = estimate.read();
      if (s.samples > 0 && !(s.seconds > 0)) torn.fetch_add(1);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kRecorders; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < kRecordsPerThread; ++i) estimate.add(0.5, t * kRecordsPerThread + i);
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  const routing::LatencyEstimate::Sample s = estimate.read();
  EXPECT_EQ(s.samples, uint64_t{kRecorders} * kRecordsPerThread);
  EXPECT_NEAR(s.seconds, 0.5, 1e-9);
  EXPECT_EQ(torn.load(), 0);
}

// Ensures the learned service rates take concurrent responses (one sample each, none lost) while decisions read
// them without a lock, and a reader never sees a rate outside the fit's clamps.
TEST(ServiceRatesConcurrency, ConcurrentSamplesAndReaders) {
  routing::ServiceRates rates;
  std::atomic<bool> done{false};
  std::atomic<int> insane{0};
  std::thread reader([&] {
    while (!done.load()) {
      const routing::ServiceRates::Rates r = rates.read();
      if (!(r.prefill_s_per_token >= routing::ServiceRates::kMinPrefillSPerToken) || !(r.base_s >= 0) ||
          !(r.queue_s_per_token >= 0) || !(r.decode_s_per_request >= 0))
        insane.fetch_add(1);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kRecorders; ++t)
    writers.emplace_back([&, t] {
      for (int i = 0; i < kRecordsPerThread; ++i) {
        const double own = 100 + (t * 7919 + i * 104729) % 2000;  // spread over 100-2,100 in any stretch of samples
        rates.add(own, 0, 0, 0.02 + own / 20000);
      }
    });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  const routing::ServiceRates::Rates r = rates.read();
  EXPECT_EQ(r.samples, uint64_t{kRecorders} * kRecordsPerThread);
  EXPECT_NEAR(1 / r.prefill_s_per_token, 20000, 1000);
  EXPECT_EQ(insane.load(), 0);
}

}  // namespace
}  // namespace prefixgate
