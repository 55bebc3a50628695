#pragma once
// A Router with prefix-cache on the real index and the character tokenizer (4 characters a block), over the pods a
// test gives: the fixture of the decision lifecycle's and disaggregation's tests.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "routing/prefix/prefix_metrics.h"
#include "routing/prefix/prefix_services.h"
#include "routing/router.h"
#include "unit/core/kv_fixtures.h"

namespace prefixgate::testing {

class PrefixRouterTest : public ::testing::Test {
 protected:
  // Builds the router over `pods` (all healthy).
  void start(std::vector<discovery::PodSpec> pods) {
    config_.discovery.file = "p.yaml";
    config_.routing.strategy = "prefix-cache";
    config_.routing.prefix_cache.block_size = 4;
    index::PrefixIndexOptions options;
    options.block_capacity = 1000;
    options.expiry = std::chrono::minutes(20);
    services_ = std::make_unique<routing::PrefixServices>(std::make_unique<tokenize::CharacterTokenizer>(), 4, 0, options,
                                                 &clock_);
    metrics_ = std::make_unique<routing::PrefixMetrics>(registry_);
    pods_.update(std::move(pods));
    for (const auto& p : pods_.snapshot()->pods()) p->recordHealth(true, 1, 1);
    router_ = std::make_unique<routing::Router>(routing::StrategyRegistry::builtin(),
                                       routing::StrategyDeps{config_, services_.get(), metrics_.get()}, pods_,
                                       [this] { return now_ms_; });
  }

  config::Config config_;
  FixedClock clock_;
  int64_t now_ms_ = 1'000'000;
  prometheus::Registry registry_;
  std::unique_ptr<routing::PrefixServices> services_;
  std::unique_ptr<routing::PrefixMetrics> metrics_;
  discovery::PodRegistry pods_;
  std::unique_ptr<routing::Router> router_;
  openai::RequestView request_;
  std::mt19937_64 rng_{7};
};

}  // namespace prefixgate::testing
