// libFuzzer target for the pods file of file discovery (discovery::parsePodsFile). Whatever the text, parsing
// must not crash, throw, leak or trip a sanitizer, every problem names the file, and a file without problems
// gives pods that discovery can use: named uniquely, with a host and port and at least one model.
// Build and run: scripts/fuzz.sh.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "discovery/file/pods_file.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace prefixgate;
  using prefixgate::fuzz::check;
  static const std::string kSource = "/etc/prefixgate/pods.yaml";
  std::vector<std::string> problems;
  auto pods = discovery::parsePodsFile(std::string(reinterpret_cast<const char*>(data), size), kSource, problems);
  for (const std::string& problem : problems) check(problem.starts_with(kSource + ": "));
  if (!problems.empty()) return 0;
  std::set<std::string> names;
  for (const auto& pod : pods) {
    check(names.insert(pod.name).second && !pod.name.empty());
    check(!pod.host.empty() && pod.port != 0 && !pod.models.empty());
    check(pod.data_parallel_size >= 1);
  }
  return 0;
}
