#pragma once
// Maps strategy names to factories and to their settings' checks. No global state: the gateway builds one
// registry at start.
//
// Adding a strategy = one file in src/routing/strategies/ (docs/architecture.md, "Adding a strategy"; copy
// strategies/power_of_two.cpp). The file declares the strategy's class, whose name is its `static constexpr
// std::string_view kName` (the name the registry gives its instance), and registers it on one line at the end, outside any namespace:
//   PREFIXGATE_STRATEGY(power_of_two, PowerOfTwoStrategy)
// The build collects those lines from every file of the folder (CMakeLists.txt generates the list that
// StrategyRegistry::builtin() registers), so no other file changes. A strategy with settings gives its class a
// nested `struct Settings` with `void read(config::YamlReader& r)` (each key read and range-checked, problems
// through r.problem(key, reason)) and a constructor (const StrategyDeps&, const Settings&): its keys are
// `routing.strategies.<name>.<key>` in the config file, checked by `prefixgate --check` like every other key.
#include <concepts>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "prefixgate/strategy.h"

namespace prefixgate::config {
class YamlReader;
}

namespace prefixgate::routing {

class PrefixServices;
class PrefixMetrics;
class SessionTable;

// What a strategy may need, handed to its factory (no downcasting, no globals). Pointers may be null in tests
// of strategies that do not use them.
struct StrategyDeps {
  const config::Config& config;
  PrefixServices* prefix = nullptr;
  PrefixMetrics* prefix_metrics = nullptr;
  SessionTable* sessions = nullptr;  // session-affinity's pins, shared with state sync (owned by the gateway)
};

// Reads `name`'s settings (routing.strategies.<name>) into `settings` through its read(), adding problems (file,
// key, reason) to `problems`. Absent: the defaults, no problem.
template <class Settings>
void readStrategySettings(const config::Config& config, const std::string& name, Settings& settings,
                          std::vector<std::string>& problems);

class StrategyRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Strategy>(const StrategyDeps&)>;
  using SettingsCheck = std::function<void(const config::Config&, std::vector<std::string>&)>;
  // A registry with every built-in strategy (every PREFIXGATE_STRATEGY line of src/routing/strategies/).
  static StrategyRegistry builtin();
  void add(std::string name, Factory factory, SettingsCheck check = {});
  // Registers strategy class S under S::kName, built with (deps, settings read from the config) when S has
  // Settings (by S::create(deps, settings) when it has one), else by S::create(deps) when it has one (null: its dependencies are absent), else with (deps) or ().
  template <class S>
  void add();
  std::vector<std::string> names() const;
  // Problems in routing.strategies: a name no strategy has, and each strategy's own settings.
  void checkSettings(const config::Config& config, std::vector<std::string>& problems) const;
  // Builds one instance of each strategy (those whose dependencies are absent from `deps` are skipped).
  std::map<std::string, std::unique_ptr<Strategy>, std::less<>> createAll(const StrategyDeps& deps) const;

 private:
  struct Entry {
    Factory factory;
    SettingsCheck check;
  };
  std::map<std::string, Entry> entries_;
};

// The settings reader behind readStrategySettings (strategy_registry.cpp): runs `read` on a YamlReader over
// routing.strategies.<name>.
void readStrategySettingsWith(const config::Config& config, const std::string& name,
                              const std::function<void(config::YamlReader&)>& read, std::vector<std::string>& problems);

template <class Settings>
void readStrategySettings(const config::Config& config, const std::string& name, Settings& settings,
                          std::vector<std::string>& problems) {
  readStrategySettingsWith(config, name, [&settings](config::YamlReader& r) { settings.read(r); }, problems);
}

template <class S>
void StrategyRegistry::add() {
  const std::string name(S::kName);
  if constexpr (requires { typename S::Settings; }) {
    add(
        name,
        [name](const StrategyDeps& deps) -> std::unique_ptr<Strategy> {
          typename S::Settings settings;
          std::vector<std::string> ignored;  // checked at start (checkSettings): the defaults stand in for a bad key
          readStrategySettings(deps.config, name, settings, ignored);
          if constexpr (requires { S::create(deps, settings); })
            return S::create(deps, settings);  // null: its dependencies are absent
          else
            return std::make_unique<S>(deps, settings);
        },
        [name](const config::Config& config, std::vector<std::string>& problems) {
          typename S::Settings settings;
          readStrategySettings(config, name, settings, problems);
        });
  } else if constexpr (requires(const StrategyDeps& deps) { S::create(deps); }) {
    add(name, [](const StrategyDeps& deps) -> std::unique_ptr<Strategy> { return S::create(deps); });
  } else if constexpr (std::constructible_from<S, const StrategyDeps&>) {
    add(name, [](const StrategyDeps& deps) -> std::unique_ptr<Strategy> { return std::make_unique<S>(deps); });
  } else {
    add(name, [](const StrategyDeps&) -> std::unique_ptr<Strategy> { return std::make_unique<S>(); });
  }
}

}  // namespace prefixgate::routing

// One line per strategy file, outside any namespace: `id` a C++ identifier unique among strategies, `Class` the
// strategy (found from namespace prefixgate::routing, its anonymous namespace included).
#define PREFIXGATE_STRATEGY(id, Class)                                                        \
  namespace prefixgate::routing::registration {                                               \
  void id(::prefixgate::routing::StrategyRegistry& registry) { registry.add<Class>(); } \
  }
