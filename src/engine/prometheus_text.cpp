#include "engine/prometheus_text.h"

#include <charconv>
#include <cmath>

namespace prefixgate::engine {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t'; }
bool isNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isNameChar(char c) { return isNameStart(c) || (c >= '0' && c <= '9'); }

// A cursor over one line; every step fails softly (returns false) so the caller can skip the line.
class LineReader {
 public:
  LineReader(std::string_view line, std::string& unescaped) : line_(line), unescaped_(unescaped) {}
  bool atEnd() const { return pos_ >= line_.size(); }
  char peek() const { return atEnd() ? '\0' : line_[pos_]; }
  void advance() { ++pos_; }
  // Returns whether any whitespace was skipped.
  bool skipSpace() {
    const size_t start = pos_;
    while (!atEnd() && isSpace(line_[pos_])) ++pos_;
    return pos_ > start;
  }
  // A bare metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or label name ([a-zA-Z_][a-zA-Z0-9_]*).
  std::string_view bareName(bool colons) {
    const size_t start = pos_;
    auto ok = [colons](char c, bool first) { return (first ? isNameStart(c) : isNameChar(c)) || (colons && c == ':'); };
    while (!atEnd() && ok(line_[pos_], pos_ == start)) ++pos_;
    return line_.substr(start, pos_ - start);
  }
  // A double-quoted string with \\, \" and \n escapes (any other escape is kept as written). The result points
  // into the line when nothing was escaped, else into `unescaped_`, which the caller reserved to the line's
  // length so that it never reallocates (earlier results stay valid).
  bool quoted(std::string_view& out) {
    if (peek() != '"') return false;
    ++pos_;
    const size_t start = pos_;
    bool escaped = false;
    for (; !atEnd() && line_[pos_] != '"'; ++pos_) {
      if (line_[pos_] != '\\') continue;
      escaped = true;
      if (++pos_ == line_.size()) return false;
    }
    if (atEnd()) return false;  // unterminated
    std::string_view raw = line_.substr(start, pos_ - start);
    ++pos_;
    if (!escaped) {
      out = raw;
      return true;
    }
    const size_t from = unescaped_.size();
    for (size_t i = 0; i < raw.size(); ++i) {
      char c = raw[i];
      if (c == '\\') {
        const char next = raw[++i];
        if (next == 'n') {
          c = '\n';
        } else {
          if (next != '\\' && next != '"') unescaped_.push_back('\\');
          c = next;
        }
      }
      unescaped_.push_back(c);
    }
    out = std::string_view(unescaped_).substr(from);
    return true;
  }
  // The next run of non-space characters.
  std::string_view token() {
    const size_t start = pos_;
    while (!atEnd() && !isSpace(line_[pos_])) ++pos_;
    return line_.substr(start, pos_ - start);
  }

 private:
  std::string_view line_;
  std::string& unescaped_;
  size_t pos_ = 0;
};

// Go's ParseFloat spellings as Prometheus writes them: decimals, exponents, NaN, +Inf, -Inf (any case).
bool parseValue(std::string_view token, double& out) {
  if (token.empty()) return false;
  if (token.front() == '+') {
    token.remove_prefix(1);
    if (token.empty() || token.front() == '-' || token.front() == '+') return false;
  }
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), out);
  return ec == std::errc() && end == token.data() + token.size();
}

// Integer milliseconds (the text format), or float seconds (OpenMetrics).
bool parseTimestamp(std::string_view token, int64_t& out_ms) {
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), out_ms);
  if (ec == std::errc() && end == token.data() + token.size()) return true;
  double seconds = 0;
  if (!parseValue(token, seconds) || !std::isfinite(seconds)) return false;
  // Outside int64 milliseconds (about 292 million years) the conversion is undefined: not a timestamp.
  const double ms = seconds * 1000;
  if (!(ms >= -0x1p63 && ms < 0x1p63)) return false;
  out_ms = static_cast<int64_t>(ms);
  return true;
}

// The `{...}` block; the line's metric name may be inside it as a lone quoted string (Prometheus 3 names).
bool parseLabels(LineReader& r, std::string_view& name, std::vector<PromLabel>& labels) {
  r.advance();  // '{'
  for (;;) {
    r.skipSpace();
    if (r.peek() == '}') break;
    std::string_view key;
    const bool quoted_key = r.peek() == '"';
    if (quoted_key ? !r.quoted(key) : (key = r.bareName(false)).empty()) return false;
    r.skipSpace();
    if (r.peek() == '=') {
      r.advance();
      r.skipSpace();
      std::string_view value;
      if (!r.quoted(value)) return false;
      labels.push_back({key, value});
    } else if (quoted_key && name.empty()) {
      name = key;
    } else {
      return false;
    }
    r.skipSpace();
    if (r.peek() == ',') {
      r.advance();
      continue;
    }
    if (r.peek() != '}') return false;
    break;
  }
  r.advance();  // '}'
  return true;
}

// Shared by parsePromLine and parsePromText: `wants` may reject the line by name before the rest is parsed.
template <class Wants>
bool parseLine(std::string_view line, PromSample& out, PromScratch& scratch, bool& bad, Wants&& wants) {
  bad = false;
  auto malformed = [&bad] {
    bad = true;
    return false;
  };
  while (!line.empty() && (line.back() == '\r' || isSpace(line.back()))) line.remove_suffix(1);
  size_t lead = 0;
  while (lead < line.size() && isSpace(line[lead])) ++lead;
  line.remove_prefix(lead);
  if (line.empty() || line.front() == '#') return false;

  scratch.labels.clear();
  scratch.unescaped.clear();
  if (scratch.unescaped.capacity() < line.size()) scratch.unescaped.reserve(line.size());
  LineReader r(line, scratch.unescaped);
  std::string_view name;
  if (r.peek() != '{') {
    name = r.bareName(true);
    if (name.empty()) return malformed();
    if (!wants(name)) return false;
  }
  if (r.peek() == '{') {
    const bool name_inside = name.empty();
    if (!parseLabels(r, name, scratch.labels) || name.empty()) return malformed();
    if (name_inside && !wants(name)) return false;
  }
  if (!r.skipSpace()) return malformed();
  if (!parseValue(r.token(), out.value)) return malformed();
  out.has_timestamp = false;
  r.skipSpace();
  if (!r.atEnd() && r.peek() != '#') {  // '#' starts an OpenMetrics exemplar: ignored
    if (!parseTimestamp(r.token(), out.timestamp_ms)) return malformed();
    out.has_timestamp = true;
    r.skipSpace();
    if (!r.atEnd() && r.peek() != '#') return malformed();
  }
  out.name = name;
  out.labels = scratch.labels;
  return true;
}

}  // namespace

bool parsePromValue(std::string_view token, double& out) { return parseValue(token, out); }

std::string_view PromSample::label(std::string_view key) const {
  for (const PromLabel& l : labels)
    if (l.name == key) return l.value;
  return {};
}

bool parsePromLine(std::string_view line, PromSample& out, PromScratch& scratch, bool& bad) {
  return parseLine(line, out, scratch, bad, [](std::string_view) { return true; });
}

PromParseStats parsePromText(std::string_view text, PromVisitor& visitor) {
  PromParseStats stats;
  PromScratch scratch;
  PromSample sample;
  auto wants = [&visitor](std::string_view name) { return visitor.wants(name); };
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    bool bad = false;
    if (parseLine(line, sample, scratch, bad, wants)) {
      ++stats.samples;
      visitor.sample(sample);
    } else if (bad) {
      ++stats.bad_lines;
    }
  }
  return stats;
}

std::vector<OwnedPromSample> parsePromSamples(std::string_view text, PromParseStats* stats) {
  struct Collect final : PromVisitor {
    std::vector<OwnedPromSample> out;
    void sample(const PromSample& s) override {
      OwnedPromSample o{std::string(s.name), {}, s.value, s.has_timestamp, s.timestamp_ms};
      for (const PromLabel& l : s.labels) o.labels.emplace_back(l.name, l.value);
      out.push_back(std::move(o));
    }
  } collect;
  PromParseStats s = parsePromText(text, collect);
  if (stats) *stats = s;
  return std::move(collect.out);
}

}  // namespace prefixgate::engine
