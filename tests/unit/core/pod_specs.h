#pragma once
// A loopback pod spec for tests.
#include <string>
#include <vector>

#include "discovery/pod_set.h"

namespace prefixgate::testing {

inline discovery::PodSpec podSpec(const std::string& name, uint16_t port, std::vector<std::string> models = {"m"}) {
  discovery::PodSpec s;
  s.name = name;
  s.address = "127.0.0.1:" + std::to_string(port);
  s.host = "127.0.0.1";
  s.port = port;
  s.models = std::move(models);
  return s;
}

}  // namespace prefixgate::testing
