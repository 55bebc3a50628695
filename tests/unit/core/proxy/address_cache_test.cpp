#include "proxy/address_cache.h"

#include <gtest/gtest.h>

namespace prefixgate::proxy {
namespace {

// A resolved address is served from the cache for kResolvedAddressTtl, then resolved again; a forgotten one at once.
TEST(AddressCache, EntriesExpireAfterTheTtl) {
  AddressCache cache;
  const AddressCache::Clock::time_point t0{};
  const boost::asio::ip::tcp::endpoint ep(boost::asio::ip::make_address("10.0.0.7"), 8000);
  EXPECT_FALSE(cache.find("engine:8000", t0));
  cache.remember("engine:8000", ep, t0);
  ASSERT_TRUE(cache.find("engine:8000", t0 + kResolvedAddressTtl - std::chrono::milliseconds(1)));
  EXPECT_EQ(*cache.find("engine:8000", t0), ep);
  EXPECT_FALSE(cache.find("engine:8000", t0 + kResolvedAddressTtl));
  EXPECT_FALSE(cache.find("other:8000", t0));
  cache.forget("engine:8000");
  EXPECT_FALSE(cache.find("engine:8000", t0));
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace prefixgate::proxy
