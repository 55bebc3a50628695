#include "routing/service_rates.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace prefixgate::routing {
namespace {
// Features are scaled so that a typical sample's are near 1: the prior's strength (kPrior samples' worth on each)
// then means the same on every rate.
constexpr double kTokenScale = 1000, kDecodeScale = 16, kPrior = 1;
constexpr int kN = 4;

// Solves m x = v (Gaussian elimination with partial pivoting; m and v are overwritten); false when singular.
bool solve(double m[kN][kN], double v[kN], double x[kN]) {
  for (int col = 0; col < kN; ++col) {
    int pivot = col;
    for (int r = col + 1; r < kN; ++r)
      if (std::abs(m[r][col]) > std::abs(m[pivot][col])) pivot = r;
    if (std::abs(m[pivot][col]) < 1e-12) return false;
    std::swap(m[col], m[pivot]);
    std::swap(v[col], v[pivot]);
    for (int r = col + 1; r < kN; ++r) {
      const double f = m[r][col] / m[col][col];
      for (int c = col; c < kN; ++c) m[r][c] -= f * m[col][c];
      v[r] -= f * v[col];
    }
  }
  for (int r = kN - 1; r >= 0; --r) {
    double s = v[r];
    for (int c = r + 1; c < kN; ++c) s -= m[r][c] * x[c];
    x[r] = s / m[r][r];
  }
  return true;
}
}  // namespace

void ServiceRates::add(double own_tokens, double queued_tokens, double decoding_requests, double ttft_s) {
  const double raw[] = {own_tokens, queued_tokens, decoding_requests, ttft_s};
  for (double v : raw)
    if (!std::isfinite(v) || v < 0) return;
  static_assert(kFeatures == kN);
  const double f[kN] = {1, own_tokens / kTokenScale, queued_tokens / kTokenScale, decoding_requests / kDecodeScale};
  // The prior, in the scaled units: kDefaults' coefficients.
  const double prior[kN] = {kDefaults.base_s, kDefaults.prefill_s_per_token * kTokenScale,
                            kDefaults.queue_s_per_token * kTokenScale, kDefaults.decode_s_per_request * kDecodeScale};
  double m[kN][kN], v[kN], x[kN] = {};
  std::lock_guard lock(mutex_);
  for (int r = 0; r < kN; ++r) {
    for (int c = 0; c < kN; ++c) xx_[r][c] = kDecay * xx_[r][c] + f[r] * f[c];
    xy_[r] = kDecay * xy_[r] + f[r] * ttft_s;
  }
  for (int r = 0; r < kN; ++r) {
    for (int c = 0; c < kN; ++c) m[r][c] = xx_[r][c] + (r == c ? kPrior : 0);
    v[r] = xy_[r] + kPrior * prior[r];
  }
  if (!solve(m, v, x)) return;
  base_.store(std::clamp(x[0], 0.0, kMaxBaseS), std::memory_order_relaxed);
  prefill_.store(std::clamp(x[1] / kTokenScale, kMinPrefillSPerToken, kMaxPrefillSPerToken), std::memory_order_relaxed);
  queue_.store(std::clamp(x[2] / kTokenScale, 0.0, kMaxPrefillSPerToken), std::memory_order_relaxed);
  decode_.store(std::clamp(x[3] / kDecodeScale, 0.0, kMaxDecodeSPerRequest), std::memory_order_relaxed);
  samples_.fetch_add(1, std::memory_order_release);
}

}  // namespace prefixgate::routing
