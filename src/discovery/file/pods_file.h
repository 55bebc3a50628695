#pragma once
// The pods file of file discovery (see CONTRACT.md) and a watcher that reloads it when it changes.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "discovery/pod_set.h"

namespace prefixgate::discovery {

// Parses the YAML text of a pods file; every problem is appended as "<source>: pods[i].key: what is wrong".
std::vector<PodSpec> parsePodsFile(const std::string& text, const std::string& source, std::vector<std::string>& problems);
std::vector<PodSpec> loadPodsFile(const std::string& path, std::vector<std::string>& problems);

// Polls the file (size, mtime and content) every `poll_interval` on `io` and publishes a changed, valid pod list
// to the registry. An invalid file is logged and ignored: the last good pod set stays in force.
class FilePodSource {
 public:
  FilePodSource(boost::asio::io_context& io, std::string path, std::chrono::milliseconds poll_interval,
                PodRegistry& registry);
  // Loads the file once now (returns its problems; empty = published) and starts polling.
  std::vector<std::string> start();
  void stop();

 private:
  void schedule();
  void poll();
  boost::asio::steady_timer timer_;
  std::string path_;
  std::chrono::milliseconds poll_interval_;
  PodRegistry& registry_;
  std::string last_text_;
  bool stopped_ = false;
};

}  // namespace prefixgate::discovery
