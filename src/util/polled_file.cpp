#include "util/polled_file.h"

#include <sys/stat.h>

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

bool PolledFile::stampOf(const std::string& path, Stamp& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  out.device = st.st_dev;
  out.inode = st.st_ino;
  out.size = static_cast<uint64_t>(st.st_size);
  out.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  out.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec;
  return true;
}

void PolledFile::poll() {
  // An unreadable file (mid-rename, removed) keeps what is in force; it is looked at again at the next poll.
  ++polls_;
  Stamp stamp;
  if (!stampOf(path_, stamp)) return;
  // Stamped before it is read: a rewrite between the two is read again at the next poll, never missed.
  if (last_stamp_ == stamp && ++polls_since_read_ < kPollsPerFullRead) return;
  std::string text;
  ++reads_;
  if (!readFileText(path_, text)) return;
  last_stamp_ = stamp;
  polls_since_read_ = 0;
  if (text != last_text_) {
    last_text_ = text;  // a rejected version is reported once, not at every poll
    on_change_(text);
  }
}

void PolledFile::schedule() {
  if (stopped_) return;
  timer_.expires_after(interval_);
  timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopped_) return;
    poll();
    schedule();
  });
}

}  // namespace prefixgate::util
