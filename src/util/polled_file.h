#pragma once
// A file watched by polling its content on an io_context: a change calls back with the new text. Used for the
// files operators rewrite while the gateway runs (pods, API keys, the admin token); content, not mtime, is compared,
// since mtime's resolution can hide a quick rewrite. Runs on one thread (the io_context's).
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <string>

namespace prefixgate::util {

// The whole file; false when it cannot be read.
bool readFileText(const std::string& path, std::string& out);

class PolledFile {
 public:
  using OnChange = std::function<void(const std::string& text)>;
  PolledFile(boost::asio::io_context& io, std::string path, std::chrono::milliseconds interval, OnChange on_change);
  // Starts polling; `current` is the text already in force (no call back until the file differs from it).
  void start(std::string current);
  void stop();

 private:
  void schedule();
  boost::asio::steady_timer timer_;
  std::string path_;
  std::chrono::milliseconds interval_;
  OnChange on_change_;
  std::string last_text_;
  bool stopped_ = false;
};

}  // namespace prefixgate::util
