#pragma once
// A small leveled logger: one line per call, written with a single write so lines from several threads never
// interleave. Thread-safe; the level may be changed at any time.
#include <atomic>
#include <cstdint>
#include <fmt/format.h>
#include <string>
#include <string_view>

namespace prefixgate::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Parses "debug", "info", "warn"/"warning", "error", "off"; returns false on anything else.
bool parseLevel(std::string_view text, Level& out);
void setLevel(Level level);
Level level();
inline bool enabled(Level l) { return static_cast<int>(l) >= static_cast<int>(level()); }

// Writes "<utc time> <LEVEL> <message>\n" to stderr.
void write(Level l, std::string_view message);

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
