// libFuzzer target for the configuration file: config::parseYaml then config::validate, as `prefixgate --check`
// runs them. Whatever the text, loading must not crash, throw, leak or trip a sanitizer, and every problem names
// the file it is in. Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prefixgate;
  static const std::string kSource = "/etc/prefixgate/config.yaml";
  static const std::vector<std::string> kStrategies = {"random", "least-request", "prefix-cache"};
  config::Problems problems;
  config::Config c = config::parseYaml(std::string(reinterpret_cast<const char*>(data), size), kSource, problems);
  config::validate(c, kStrategies, problems);
  for (const std::string& problem : problems) fuzz::check(problem.starts_with(kSource + ": "));
  return 0;
}
