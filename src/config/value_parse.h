#pragma once
// Parsing configuration scalars from text, shared by the YAML reader and the environment variables.
#include <charconv>
#include <cmath>
#include <string>

namespace prefixgate::config {

// true/false/1/0 (any of True/TRUE/...); with `yaml_words`, also yes/no as YAML writers use them.
inline bool parseBool(const std::string& s, bool& out, bool yaml_words = false) {
  if (s == "true" || s == "True" || s == "TRUE" || s == "1" || (yaml_words && s == "yes")) out = true;
  else if (s == "false" || s == "False" || s == "FALSE" || s == "0" || (yaml_words && s == "no")) out = false;
  else return false;
  return true;
}

// A whole non-negative number that fits T, with nothing after it.
template <class T>
bool parseUnsigned(const std::string& s, T& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// A finite number, with nothing after it.
inline bool parseDouble(const std::string& s, double& out) {
  try {
    size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size() && std::isfinite(out);
  } catch (...) {
    return false;
  }
}

}  // namespace prefixgate::config
