#pragma once
// How fast one pod serves, learned online from the streams relayed to it (prefix-cache's wait scorer reads it).
// Model of a stream's time to first token (from the request's start to its first body byte: TTFT):
//   ttft = base + prefill_s_per_token x own tokens + queue_s_per_token x queued tokens
//          + decode_s_per_request x decoding requests
// where the own tokens are the request's uncached prompt tokens, the queued tokens those of the requests sent to the
// pod before it that had not begun answering (the prompt tokens they were predicted to miss), and the decoding
// requests those past their first token, each slowing every engine step (vLLM batches decodes with prefills). The
// queue has its own rate because its effect depends on the engine: with chunked prefill a short queue shares the
// request's step (costing less than prefilling the same tokens alone would), under KV pressure a queue waits for
// memory (costing more). Fitted by
// exponentially weighted least squares (a sample's weight decays by kDecay per later sample: about the last
// 1 / (1 - kDecay) responses count), with a weak ridge prior towards kDefaults so that a pod with few samples, or
// samples that all look alike, keeps sane rates. Every response adds a sample under the pod's mutex; readers take
// no lock (each rate is published as its own atomic: a read during an update may mix old and new rates).
#include <atomic>
#include <cstdint>
#include <mutex>

namespace prefixgate::routing {

class ServiceRates {
 public:
  struct Rates {
    double base_s = 0;                // TTFT with nothing to compute: a step's fixed cost, the wait for a step
    double prefill_s_per_token = 0;   // 1 / prefill tokens per second (the request's own tokens)
    double queue_s_per_token = 0;     // added TTFT per prompt token queued ahead of the request
    double decode_s_per_request = 0;  // added TTFT per request decoding on the pod
    uint64_t samples = 0;             // responses learned from (0: the defaults)
  };
  // Until a pod has samples: an 8B model on one H100 (docs/configuration.md, prefix-cache-wait; the engine
  // simulator's defaults, docs/simulator.md): 15 ms step overhead + 4.5 ms decode floor + half a step's wait;
  // 25,000 prefill tokens/s; 0.046 ms per running sequence per step over about two steps.
  // A queued token costs as much as one of the request's own until measured.
  static constexpr Rates kDefaults{0.025, 1.0 / 25000, 1.0 / 25000, 0.0001, 0};
  static constexpr double kDecay = 0.99;
  // The clamps applied to every fit (a pod reported faster than 10M or slower than 100 prefill tokens/s is noise;
  // a queue never shortens the wait).
  static constexpr double kMinPrefillSPerToken = 1e-7, kMaxPrefillSPerToken = 1e-2, kMaxBaseS = 30,
                          kMaxDecodeSPerRequest = 1;

  // One stream: its own uncached tokens, the queued tokens and decoding requests when it was sent, and its TTFT.
  // Ignores non-finite or negative numbers.
  void add(double own_tokens, double queued_tokens, double decoding_requests, double ttft_s);
  Rates read() const {
    const uint64_t samples = samples_.load(std::memory_order_acquire);
    if (samples == 0) return kDefaults;
    return {base_.load(std::memory_order_relaxed), prefill_.load(std::memory_order_relaxed),
            queue_.load(std::memory_order_relaxed), decode_.load(std::memory_order_relaxed), samples};
  }

 private:
  std::mutex mutex_;
  static constexpr int kFeatures = 4;
  // Weighted normal equations over the scaled features (1, own tokens / kTokenScale, queued tokens / kTokenScale,
  // decoding / kDecodeScale); guarded by mutex_.
  double xx_[kFeatures][kFeatures] = {};
  double xy_[kFeatures] = {};
  std::atomic<double> base_{kDefaults.base_s};
  std::atomic<double> prefill_{kDefaults.prefill_s_per_token};
  std::atomic<double> queue_{kDefaults.queue_s_per_token};
  std::atomic<double> decode_{kDefaults.decode_s_per_request};
  std::atomic<uint64_t> samples_{0};
};

}  // namespace prefixgate::routing
