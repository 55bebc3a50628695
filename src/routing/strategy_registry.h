#pragma once
// Maps strategy names to factories. Adding a strategy = one file in strategies/ + one line in
// strategy_registry.cpp. No global state: the gateway builds one registry at start.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "prefixgate/strategy.h"

namespace prefixgate::routing {

class PrefixServices;
class PrefixMetrics;

// What a strategy may need, handed to its factory (no downcasting, no globals). Pointers may be null in tests
// of strategies that do not use them.
struct StrategyDeps {
  const config::Config& config;
  PrefixServices* prefix = nullptr;
  PrefixMetrics* prefix_metrics = nullptr;
};

class StrategyRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Strategy>(const StrategyDeps&)>;
  // A registry with every built-in strategy.
  static StrategyRegistry builtin();
  void add(std::string name, Factory factory) { factories_[std::move(name)] = std::move(factory); }
  std::vector<std::string> names() const;
  // Builds one instance of each strategy (those whose dependencies are absent from `deps` are skipped).
  std::map<std::string, std::unique_ptr<Strategy>, std::less<>> createAll(const StrategyDeps& deps) const;

 private:
  std::map<std::string, Factory> factories_;
};

void registerRandom(StrategyRegistry& registry);
void registerLeastRequest(StrategyRegistry& registry);
void registerPrefixCache(StrategyRegistry& registry);
void registerLoadBalance(StrategyRegistry& registry);
void registerLeastKvCache(StrategyRegistry& registry);
void registerThroughput(StrategyRegistry& registry);

}  // namespace prefixgate::routing
