#include "engine/engine_load.h"

#include <gtest/gtest.h>

#include <cmath>

namespace prefixgate::engine {
namespace {

EngineSnapshot scraped(int64_t at_ms, double waiting, double kv_usage) {
  EngineSnapshot s;
  s.scraped_at_ms = at_ms;
  s.waiting = waiting;
  s.has_waiting = true;
  s.kv_usage = kv_usage;
  s.has_kv_usage = true;
  return s;
}

// Before any scrape, routing sees nothing known and nothing fresh.
TEST(EngineLoadView, UnknownUntilTheFirstScrape) {
  EngineLoad load;
  EngineLoadView v = load.view();
  EXPECT_TRUE(std::isnan(v.waiting));
  EXPECT_TRUE(std::isnan(v.kv_usage));
  EXPECT_FALSE(v.fresh(1000, 600));
  EXPECT_FALSE(load.latest().valid);
}

// A published scrape is what routing reads, fresh until it is older than the limit.
TEST(EngineLoadView, PublishedSnapshotIsFreshUntilTheLimit) {
  EngineLoad load;
  load.publish(scraped(10'000, 4, 0.5));
  EngineLoadView v = load.view();
  EXPECT_DOUBLE_EQ(v.waiting, 4);
  EXPECT_DOUBLE_EQ(v.kv_usage, 0.5);
  EXPECT_TRUE(v.fresh(10'600, 600));
  EXPECT_FALSE(v.fresh(10'601, 600));
  EXPECT_TRUE(load.latest().valid);
}

// A metric the engine did not report stays unknown (NaN) for routing, not 0.
TEST(EngineLoadView, MissingMetricsStayUnknown) {
  EngineLoad load;
  EngineSnapshot s;
  s.scraped_at_ms = 5;
  s.running = 3;
  s.has_running = true;
  load.publish(s);
  EXPECT_TRUE(std::isnan(load.view().waiting));
  EXPECT_TRUE(std::isnan(load.view().kv_usage));
}

// A failed scrape keeps the last values, marked stale with the reason; the next success clears it.
TEST(EngineLoad, FailedScrapeKeepsValuesAndMarksStale) {
  EngineLoad load;
  load.publish(scraped(1000, 2, 0.3));
  load.markScrapeFailed("connect: refused");
  load.markScrapeFailed("connect: refused");
  EngineSnapshot s = load.latest();
  EXPECT_TRUE(s.stale);
  EXPECT_EQ(s.failed_scrapes, 2u);
  EXPECT_EQ(s.last_error, "connect: refused");
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.3);
  EXPECT_EQ(load.view().scraped_at_ms, 1000);  // age keeps growing: routing turns neutral by itself
  load.publish(scraped(2000, 0, 0.1));
  s = load.latest();
  EXPECT_FALSE(s.stale);
  EXPECT_EQ(s.failed_scrapes, 0u);
  EXPECT_EQ(s.last_error, "");
}

// The staleness limit: three intervals, but never less than one interval plus the timeout.
TEST(EngineLoad, MaxAge) {
  EXPECT_EQ(maxEngineMetricsAgeMs(200, 100), 600);
  EXPECT_EQ(maxEngineMetricsAgeMs(200, 1000), 1200);
}

// The measured capacity reaches the lock-free view as well.
TEST(EngineLoad, CapacityInTheView) {
  EngineLoad load;
  EXPECT_DOUBLE_EQ(load.view().capacity, 0);
  for (int64_t t = 1000; t <= 3000; t += 100) load.addOutputTokens(50, t);
  EXPECT_GT(load.view().capacity, 0);
  EXPECT_DOUBLE_EQ(load.view().capacity, load.capacityTokensPerSecond(3000));
}

}  // namespace
}  // namespace prefixgate::engine
