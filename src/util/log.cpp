#include "util/log.h"

#include <unistd.h>

#include <ctime>
#include <nlohmann/json.hpp>

namespace prefixgate::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};
std::atomic<int> g_format{static_cast<int>(Format::kText)};
constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR", "OFF"};
constexpr const char* kJsonNames[] = {"debug", "info", "warn", "error", "off"};

std::string utcTime(std::chrono::system_clock::time_point now) {
  using namespace std::chrono;
  std::time_t secs = system_clock::to_time_t(now);
  auto millis = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
}

void writeLine(const std::string& line) {
  // One write(2) per line: atomic with respect to other threads' lines for pipes and files.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}
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

bool parseFormat(std::string_view text, Format& out) {
  if (text == "text") out = Format::kText;
  else if (text == "json") out = Format::kJson;
  else return false;
  return true;
}

void setFormat(Format f) { g_format.store(static_cast<int>(f), std::memory_order_relaxed); }
Format format() { return static_cast<Format>(g_format.load(std::memory_order_relaxed)); }

std::string textLine(Level l, std::string_view message, std::chrono::system_clock::time_point now) {
  return fmt::format("{} {} {}\n", utcTime(now), kNames[static_cast<int>(l)], message);
}

nlohmann::ordered_json record(Level l, std::string_view msg, std::chrono::system_clock::time_point now) {
  nlohmann::ordered_json out;
  out["ts"] = utcTime(now);
  out["level"] = kJsonNames[static_cast<int>(l)];
  out["msg"] = std::string(msg);
  return out;
}

std::string dumpRecord(const nlohmann::ordered_json& record) {
  return record.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

void writeRecord(const nlohmann::ordered_json& r) { writeLine(dumpRecord(r)); }

void write(Level l, std::string_view message) {
  const auto now = std::chrono::system_clock::now();
  if (format() == Format::kJson) writeRecord(record(l, message, now));
  else writeLine(textLine(l, message, now));
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
