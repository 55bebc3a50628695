#pragma once
// Resolved addresses of host-named pods (Kubernetes services), so a request does not wait for the resolver. One
// cache per event-loop thread (inside its UpstreamPool): no locks. Entries live kResolvedAddressTtl: long enough
// to take the resolver off the request path, short enough to follow a service that moved within a scrape or two.
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>

namespace prefixgate::proxy {

inline constexpr std::chrono::seconds kResolvedAddressTtl{30};

class AddressCache {
 public:
  using Clock = std::chrono::steady_clock;
  // The address of `host_port` resolved less than kResolvedAddressTtl before `now`, or nothing.
  std::optional<boost::asio::ip::tcp::endpoint> find(const std::string& host_port, Clock::time_point now) const;
  void remember(const std::string& host_port, boost::asio::ip::tcp::endpoint endpoint, Clock::time_point now);
  // Drops an entry whose address failed, so the next request resolves again.
  void forget(const std::string& host_port) { entries_.erase(host_port); }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    boost::asio::ip::tcp::endpoint endpoint;
    Clock::time_point resolved;
  };
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace prefixgate::proxy
