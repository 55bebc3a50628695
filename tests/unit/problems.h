#pragma once
// Checks on the problem lists that configuration and key-file parsers return.
#include <algorithm>
#include <string>
#include <vector>

namespace prefixgate::testing {

// Whether one of `problems` contains `needle`.
inline bool hasProblem(const std::vector<std::string>& problems, const std::string& needle) {
  return std::any_of(problems.begin(), problems.end(),
                     [&](const std::string& p) { return p.find(needle) != std::string::npos; });
}

}  // namespace prefixgate::testing
