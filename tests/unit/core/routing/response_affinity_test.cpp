#include "routing/response_affinity.h"

#include <gtest/gtest.h>

#include <string>

namespace prefixgate::routing {
namespace {

struct Clock {
  int64_t now = 1000;
};

// Ensures an id maps to the pod that produced it, and is forgotten on request.
TEST(ResponseAffinity, RemembersAndForgets) {
  Clock clock;
  ResponseAffinity map(10, 1000, [&] { return clock.now; });
  map.remember("resp_a", "pod-1");
  EXPECT_EQ(map.podOf("resp_a").value_or(""), "pod-1");
  map.remember("resp_a", "pod-2");  // produced again (a replayed id): the latest pod wins
  EXPECT_EQ(map.podOf("resp_a").value_or(""), "pod-2");
  EXPECT_FALSE(map.podOf("resp_b"));
  map.forget("resp_a");
  EXPECT_FALSE(map.podOf("resp_a"));
  EXPECT_EQ(map.size(), 0u);
}

// Ensures entries expire ttl_ms after their last use, and a use refreshes them.
TEST(ResponseAffinity, TtlWithInjectedClock) {
  Clock clock;
  ResponseAffinity map(10, 1000, [&] { return clock.now; });
  map.remember("resp_a", "pod-1");
  map.remember("resp_b", "pod-1");
  clock.now += 600;
  EXPECT_TRUE(map.podOf("resp_a"));  // refreshed: lives until 2600
  clock.now += 600;
  EXPECT_TRUE(map.podOf("resp_a"));
  EXPECT_FALSE(map.podOf("resp_b"));  // expired at 2000
  EXPECT_EQ(map.size(), 1u);
}

// Ensures the map never holds more than max_entries, dropping the least recently used first.
TEST(ResponseAffinity, BoundedLeastRecentlyUsedFirst) {
  Clock clock;
  ResponseAffinity map(3, 1000000, [&] { return clock.now; });
  map.remember("resp_1", "p");
  map.remember("resp_2", "p");
  map.remember("resp_3", "p");
  EXPECT_TRUE(map.podOf("resp_1"));  // now the most recent
  map.remember("resp_4", "p");       // drops resp_2
  EXPECT_EQ(map.size(), 3u);
  EXPECT_TRUE(map.podOf("resp_1"));
  EXPECT_FALSE(map.podOf("resp_2"));
  for (int i = 0; i < 1000; ++i) map.remember("resp_x" + std::to_string(i), "p");
  EXPECT_EQ(map.size(), 3u);
}

// Ensures hostile ids (too long, odd characters) are never stored, so they cannot grow memory.
TEST(ResponseAffinity, HostileIdsAreNotStored) {
  Clock clock;
  ResponseAffinity map(10, 1000, [&] { return clock.now; });
  map.remember(std::string(100000, 'r'), "p");
  map.remember("resp/../x", "p");
  map.remember("", "p");
  EXPECT_EQ(map.size(), 0u);
  EXPECT_FALSE(map.podOf(std::string(100000, 'r')));
  ResponseAffinity off(0, 1000, [&] { return clock.now; });
  off.remember("resp_a", "p");
  EXPECT_EQ(off.size(), 0u);
}

// Ensures outcomes are counted by kind.
TEST(ResponseAffinity, CountsOutcomes) {
  ResponseAffinity map(10, 1000, [] { return int64_t{0}; });
  map.count(ResponseAffinity::Outcome::kHit);
  map.count(ResponseAffinity::Outcome::kHit);
  map.count(ResponseAffinity::Outcome::kPodGone);
  EXPECT_EQ(map.counted(ResponseAffinity::Outcome::kHit), 2u);
  EXPECT_EQ(map.counted(ResponseAffinity::Outcome::kPodGone), 1u);
  EXPECT_EQ(map.counted(ResponseAffinity::Outcome::kUnknown), 0u);
}

}  // namespace
}  // namespace prefixgate::routing
