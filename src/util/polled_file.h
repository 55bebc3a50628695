#pragma once
// A file watched by polling on an io_context: a change calls back with the new text. Used for the files operators
// rewrite while the gateway runs (pods, API keys, the admin token). Each poll is one stat(): the file is read only
// when its identity, size, mtime or ctime moved, and in full every kPollsPerFullRead polls whatever they say (the
// timestamps come from a coarse clock, so two rewrites of one size within a tick can leave them alone); content,
// not the stamp, decides whether the text changed. Runs on one thread (the io_context's).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace prefixgate::util {

// The whole file; false when it cannot be read.
bool readFileText(const std::string& path, std::string& out);

class PolledFile {
 public:
  static constexpr int kPollsPerFullRead = 10;
  using OnChange = std::function<void(const std::string& text)>;
  PolledFile(boost::asio::io_context& io, std::string path, std::chrono::milliseconds interval, OnChange on_change);
  // Starts polling; `current` is the text already in force (no call back until the file differs from it).
  void start(std::string current);
  void stop();
  // Polls so far, and how many of them read the file.
  uint64_t polls() const { return polls_; }
  uint64_t reads() const { return reads_; }

 private:
  // What stat() says of the file: a change of any field sends the next poll to read it.
  struct Stamp {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  static bool stampOf(const std::string& path, Stamp& out);
  void schedule();
  void poll();
  boost::asio::steady_timer timer_;
  std::string path_;
  std::chrono::milliseconds interval_;
  OnChange on_change_;
  std::string last_text_;
  std::optional<Stamp> last_stamp_;  // of the last read; none before the first
  int polls_since_read_ = 0;
  uint64_t polls_ = 0;
  uint64_t reads_ = 0;
  bool stopped_ = false;
};

}  // namespace prefixgate::util
