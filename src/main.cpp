// prefixgate: a prefix-cache aware, OpenAI-compatible gateway for LLM engine pods.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "auth/credentials.h"
#include "config/config.h"
#include "discovery/file/pods_file.h"
#include "routing/strategy_registry.h"
#include "server/gateway.h"
#include "util/allocator_tuning.h"
#include "util/log.h"

namespace {

std::string environmentHelp() {
  std::string out = "\nEnvironment variables (override the file; flags override them):\n";
  for (const auto& [variable, key] : prefixgate::config::environmentVariables())
    out += "  " + variable + std::string(variable.size() < 58 ? 58 - variable.size() : 1, ' ') + key + "\n";
  return out;
}

// The strategies that score by the prompt's prefix match: those that say so, and those that cannot be built without
// the prefix services (every prefix strategy; a bare StrategyDeps has none).
std::vector<std::string> promptMatchStrategies(const prefixgate::routing::StrategyRegistry& registry,
                                               const prefixgate::config::Config& config) {
  const auto built = registry.createAll(prefixgate::routing::StrategyDeps{config});
  std::vector<std::string> out;
  for (const std::string& name : registry.names()) {
    auto it = built.find(name);
    if (it == built.end() || it->second->wantsPromptMatch()) out.push_back(name);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace prefixgate;
  CLI::App app{
      "prefixgate: an OpenAI-compatible gateway that sends each request to the engine pod already holding the\n"
      "longest matching prefix of its prompt in its KV cache, weighed against that pod's load.\n"
      "Configuration: built-in defaults < YAML file (--config) < environment < these flags.",
      "prefixgate"};
  std::string config_path, listen, admin_listen, log_level, log_format;
  unsigned threads = 0;
  bool check = false, version = false;
  app.add_option("-c,--config", config_path, "YAML configuration file (see conf/prefixgate.yaml)");
  app.add_flag("--check", check, "Validate the configuration and the files it names (pods, API keys, admin token), then exit (0 = valid)");
  app.add_option("--listen", listen, "Client listener HOST:PORT (overrides `listen`; port 0 picks a free port)");
  app.add_option("--admin-listen", admin_listen, "Admin listener HOST:PORT for /metrics, /healthz, /readyz, /debug/*");
  app.add_option("--threads", threads, "Event-loop threads (0 = one per core)");
  app.add_option("--log-level", log_level, "debug, info, warn, error or off");
  app.add_option("--log-format", log_format, "text or json (one JSON object per line)");
  app.add_flag("--version", version, "Print the version and exit");
  app.footer(environmentHelp());
  CLI11_PARSE(app, argc, argv);
  if (version) {
    std::printf("prefixgate %s\n", PREFIXGATE_VERSION);
    return 0;
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "prefixgate: --config FILE is required (try --help)\n");
    return 1;
  }

  config::Problems problems;
  config::Config cfg = config::loadFile(config_path, problems);
  config::applyEnvironment(cfg, [](const char* name) { return std::getenv(name); }, problems);
  if (!listen.empty()) cfg.listen = listen;
  if (!admin_listen.empty()) cfg.admin_listen = admin_listen;
  if (app.count("--threads")) cfg.threads = threads;
  if (!log_level.empty()) cfg.log_level = log_level;
  if (!log_format.empty()) cfg.log_format = log_format;
  const routing::StrategyRegistry strategies = routing::StrategyRegistry::builtin();
  config::validate(cfg, strategies.names(), problems);
  strategies.checkSettings(cfg, problems);
  // The strategies are built to ask them only from a configuration that passed the other checks.
  config::validateDecodeStrategy(
      cfg, strategies.names(), problems.empty() ? promptMatchStrategies(strategies, cfg) : std::vector<std::string>{},
      problems);
  if (problems.empty() && check && !cfg.discovery.file.empty()) discovery::checkPodsFile(cfg.discovery.file, problems);
  if (problems.empty() && check)
    auth::checkFiles(cfg.auth, problems,
                     cfg.flow_control.enabled ? flow::classNames(cfg.flow_control) : std::vector<std::string>{});
  if (!problems.empty()) {
    for (const auto& p : problems) std::fprintf(stderr, "%s\n", p.c_str());
    return 1;
  }
  if (check) {
    std::printf("%s: configuration is valid\n", cfg.source.c_str());
    return 0;
  }
  log::Level level;
  log::parseLevel(cfg.log_level, level);
  log::setLevel(level);
  log::Format format;
  log::parseFormat(cfg.log_format, format);
  log::setFormat(format);

  log::info("{}", util::tuneAllocator(std::getenv("GLIBC_TUNABLES")));
  server::Gateway gateway(cfg);
  std::string error;
  if (!gateway.start(error)) {
    // With json logs even this last line is a JSON object, whatever the level, so a log collector keeps it.
    if (format == log::Format::kJson) log::write(log::Level::kError, "prefixgate: " + error);
    else std::fprintf(stderr, "prefixgate: %s\n", error.c_str());
    return 1;
  }
  std::printf("listening on %s:%u\nadmin listening on %s:%u\n", cfg.listen.substr(0, cfg.listen.rfind(':')).c_str(),
              gateway.listenPort(), cfg.admin_listen.substr(0, cfg.admin_listen.rfind(':')).c_str(), gateway.adminPort());
  if (gateway.healthPort())
    std::printf("health listening on %s:%u\n", cfg.health_listen.substr(0, cfg.health_listen.rfind(':')).c_str(),
                gateway.healthPort());
  std::fflush(stdout);
  gateway.wait();
  return 0;
}
