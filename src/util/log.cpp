#include "util/log.h"

#include <unistd.h>

#include <chrono>
#include <ctime>

namespace prefixgate::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR", "OFF"};
}  // namespace

bool parseLevel(std::string_view text, Level& out) {
  if (text == "debug") out = Level::kDebug;
  else if (text == "info") out = Level::kInfo;
  else if (text == "warn" || text == "warning") out = Level::kWarn;
  else if (text == "error") out = Level::kError;
  else if (text == "off") out = Level::kOff;
  else return false;
  return true;
}

void setLevel(Level l) { g_level.store(static_cast<int>(l), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

void write(Level l, std::string_view message) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::string line = fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z {} {}\n", tm.tm_year + 1900,
                                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis,
                                 kNames[static_cast<int>(l)], message);
  // One write(2) per line: atomic with respect to other threads' lines for pipes and files.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

bool Throttle::allow(uint64_t& suppressed) {
  using namespace std::chrono;
  const int64_t now = duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
  int64_t last = last_ms_.load(std::memory_order_relaxed);
  if (now - last < every_ms_ || !last_ms_.compare_exchange_strong(last, now)) {
    held_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  suppressed = held_.exchange(0, std::memory_order_relaxed);
  return true;
}

}  // namespace prefixgate::log
