#pragma once
// The pods file of file discovery (see CONTRACT.md) and a watcher that reloads it when it changes.
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "discovery/pod_set.h"
#include "util/polled_file.h"

namespace prefixgate::discovery {

// Parses the YAML text of a pods file; every problem is appended as "<source>: pods[i].key: what is wrong".
std::vector<PodSpec> parsePodsFile(const std::string& text, const std::string& source, std::vector<std::string>& problems);
std::vector<PodSpec> loadPodsFile(const std::string& path, std::vector<std::string>& problems);
// What `prefixgate --check` says of a pods file: loadPodsFile's problems, else each model with prefill pods but none
// to decode on (undecodableModels), as "<path>: model 'm': prefill pods ...". The running gateway only warns of the
// latter (a decode pod may be on its way), through warnUndecodable.
void checkPodsFile(const std::string& path, std::vector<std::string>& problems);
// Logs a warning per model of `pods` with prefill pods but none to decode on.
void warnUndecodable(const std::vector<PodSpec>& pods, const std::string& source);

// Polls the file's content every `poll_interval` on `io` (util::PolledFile) and publishes a changed, valid pod list
// to the registry. An invalid file is logged and ignored: the last good pod set stays in force.
class FilePodSource {
 public:
  FilePodSource(boost::asio::io_context& io, std::string path, std::chrono::milliseconds poll_interval,
                PodRegistry& registry);
  // Loads the file once now (returns its problems; empty = published) and starts polling.
  std::vector<std::string> start();
  void stop();

 private:
  void apply(const std::string& text);
  std::string path_;
  PodRegistry& registry_;
  util::PolledFile file_;
};

}  // namespace prefixgate::discovery
