#pragma once
// A small leveled logger: one line per call, written with a single write so lines from several threads never
// interleave. Thread-safe; the level and the format may be changed at any time.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fmt/format.h>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

namespace prefixgate::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };
// kText: "<utc time> <LEVEL> <message>"; kJson: one JSON object per line (`log_format`, docs/configuration.md).
enum class Format { kText = 0, kJson = 1 };

// Parses "debug", "info", "warn"/"warning", "error", "off"; returns false on anything else.
bool parseLevel(std::string_view text, Level& out);
void setLevel(Level level);
Level level();
inline bool enabled(Level l) { return static_cast<int>(l) >= static_cast<int>(level()); }

// Parses "text" or "json"; returns false on anything else.
bool parseFormat(std::string_view text, Format& out);
void setFormat(Format format);
Format format();

// Writes one line to stderr: "<utc time> <LEVEL> <message>\n", or in the JSON format {"ts","level","msg"}.
void write(Level l, std::string_view message);

// Structured lines (the JSON format). record() starts an object with "ts" (UTC, milliseconds) and "level" (lower
// case) and "msg"; the caller adds its fields and hands it to writeRecord.
nlohmann::ordered_json record(Level l, std::string_view msg,
                              std::chrono::system_clock::time_point now = std::chrono::system_clock::now());
// The object as one line with its newline. Never throws: strings that are not valid UTF-8 (client-given text) have
// their bad bytes replaced by U+FFFD.
std::string dumpRecord(const nlohmann::ordered_json& record);
void writeRecord(const nlohmann::ordered_json& record);
// The text line write() emits in the text format, for tests.
std::string textLine(Level l, std::string_view message, std::chrono::system_clock::time_point now);

template <class... Args>
void debug(fmt::format_string<Args...> fmt, Args&&... args) {
  if (enabled(Level::kDebug)) write(Level::kDebug, fmt::format(fmt, std::forward<Args>(args)...));
}
template <class... Args>
void info(fmt::format_string<Args...> fmt, Args&&... args) {
  if (enabled(Level::kInfo)) write(Level::kInfo, fmt::format(fmt, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> fmt, Args&&... args) {
  if (enabled(Level::kWarn)) write(Level::kWarn, fmt::format(fmt, std::forward<Args>(args)...));
}
template <class... Args>
void error(fmt::format_string<Args...> fmt, Args&&... args) {
  if (enabled(Level::kError)) write(Level::kError, fmt::format(fmt, std::forward<Args>(args)...));
}

// Lets one line through per interval for a warning that a peer or a client can repeat at will (a malformed batch
// from another replica, a tokenizer that never answers), so the log says what happens without flooding. allow()
// returns true at most once per interval and then reports, in `suppressed`, how many calls it held back since the
// last line it let through. Thread-safe.
class Throttle {
 public:
  explicit Throttle(int64_t every_ms = 1000) : every_ms_(every_ms) {}
  bool allow(uint64_t& suppressed);

 private:
  const int64_t every_ms_;
  std::atomic<int64_t> last_ms_{INT64_MIN / 2};
  std::atomic<uint64_t> held_{0};
};

}  // namespace prefixgate::log
