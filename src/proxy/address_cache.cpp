#include "proxy/address_cache.h"

namespace prefixgate::proxy {

std::optional<boost::asio::ip::tcp::endpoint> AddressCache::find(const std::string& host_port,
                                                                Clock::time_point now) const {
  auto it = entries_.find(host_port);
  if (it == entries_.end() || now - it->second.resolved >= kResolvedAddressTtl) return std::nullopt;
  return it->second.endpoint;
}

void AddressCache::remember(const std::string& host_port, boost::asio::ip::tcp::endpoint endpoint,
                            Clock::time_point now) {
  // Expired entries are replaced here; pods that left are few and their entries small, so no sweep.
  entries_[host_port] = Entry{endpoint, now};
}

}  // namespace prefixgate::proxy
