#include "routing/strategy_registry.h"

namespace prefixgate::routing {

StrategyRegistry StrategyRegistry::builtin() {
  StrategyRegistry r;
  registerRandom(r);
  registerLeastRequest(r);
  registerPrefixCache(r);
  registerLoadBalance(r);
  registerLeastKvCache(r);
  registerThroughput(r);
  return r;
}

std::vector<std::string> StrategyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : factories_) out.push_back(name);
  return out;
}

std::map<std::string, std::unique_ptr<Strategy>, std::less<>> StrategyRegistry::createAll(const StrategyDeps& deps) const {
  std::map<std::string, std::unique_ptr<Strategy>, std::less<>> out;
  for (const auto& [name, f] : factories_)
    if (auto strategy = f(deps)) out.emplace(name, std::move(strategy));
  return out;
}

}  // namespace prefixgate::routing
