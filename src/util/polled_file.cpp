#include "util/polled_file.h"

#include <fstream>
#include <sstream>

namespace prefixgate::util {

bool readFileText(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

PolledFile::PolledFile(boost::asio::io_context& io, std::string path, std::chrono::milliseconds interval,
                       OnChange on_change)
    : timer_(io), path_(std::move(path)), interval_(interval), on_change_(std::move(on_change)) {}

void PolledFile::start(std::string current) {
  last_text_ = std::move(current);
  schedule();
}

void PolledFile::stop() {
  stopped_ = true;
  timer_.cancel();
}

void PolledFile::schedule() {
  if (stopped_) return;
  timer_.expires_after(interval_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    std::string text;
    // An unreadable file (mid-rename, removed) keeps what is in force; it is read again at the next poll.
    if (readFileText(path_, text) && text != last_text_) {
      last_text_ = text;  // a rejected version is reported once, not at every poll
      on_change_(text);
    }
    schedule();
  });
}

}  // namespace prefixgate::util
