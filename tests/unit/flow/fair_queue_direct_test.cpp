// Requests admitted straight through (FairQueue::admitDirect) and the in-flight tie-break: what a tenant is served
// while the fleet has room counts once it saturates, and a tenant lifted to the floor goes before the busier one
// it ties with.
#include <gtest/gtest.h>

#include <string>

#include "flow/fair_queue.h"

namespace prefixgate::flow {
namespace {

FlowConfig oneClass() {
  FlowConfig config;
  config.enabled = true;
  return config;
}

QueuedItem item(uint64_t id, std::string tenant, int64_t now = 0) {
  return QueuedItem{id, std::move(tenant), 0, 100, 100, now, 1'000'000};
}

// Ensures a burst that went straight through is charged: when the fleet saturates, the bursting tenant's queued
// requests go after a newcomer's (without the charge both would start level and the burster's head is older).
TEST(FairQueueDirect, StraightThroughServiceCountsOnceTheQueueForms) {
  FairQueue queue(oneClass());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(queue.admitDirect("flood", 0, 1000), "flood");
  EXPECT_DOUBLE_EQ(*queue.counter("flood", 0), 8000);
  ASSERT_TRUE(queue.enqueue(item(1, "flood")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "steady")).queued());
  EXPECT_EQ(queue.popNext()->tenant, "steady");
  EXPECT_EQ(queue.popNext()->tenant, "flood");
  // Ending them releases the flow: nothing queued, nothing in flight, and counters at the floor are forgotten.
  for (int i = 0; i < 9; ++i) queue.finished("flood", 0);
  queue.finished("steady", 0);
  EXPECT_LE(queue.flowCount(), 2u);
}

// Ensures a newcomer lifted to the floor (equal counters) goes before the tenant with requests in flight, even
// though that tenant's head was queued first.
TEST(FairQueueDirect, TiesGoToTheFlowWithFewerInFlight) {
  FairQueue queue(oneClass());
  ASSERT_TRUE(queue.enqueue(item(1, "flood")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "flood")).queued());
  EXPECT_EQ(queue.popNext()->tenant, "flood");  // flood: counter 100, one in flight, one queued
  ASSERT_TRUE(queue.enqueue(item(3, "steady")).queued());  // lifted to the floor: 100, none in flight
  EXPECT_DOUBLE_EQ(*queue.counter("steady", 0), 100);
  EXPECT_EQ(queue.popNext()->tenant, "steady");
  EXPECT_EQ(queue.popNext()->tenant, "flood");
}

// Ensures an idle tenant admitted straight through does not bank its idle time: it is lifted to the floor first.
TEST(FairQueueDirect, AnIdleTenantIsLiftedBeforeItIsCharged) {
  FairQueue queue(oneClass());
  ASSERT_TRUE(queue.enqueue(item(1, "a")).queued());
  queue.popNext();  // a: 100 in flight
  ASSERT_TRUE(queue.enqueue(item(2, "a")).queued());  // a backlogged at 100: the floor
  queue.admitDirect("b", 0, 10);
  EXPECT_DOUBLE_EQ(*queue.counter("b", 0), 110);  // 100 (the floor) + 10, not 10
}

// Ensures direct admissions respect max_tenants: past it, tenants share the overflow flow.
TEST(FairQueueDirect, PastMaxTenantsTheOverflowFlowIsCharged) {
  FlowConfig config = oneClass();
  config.max_tenants = 1;
  FairQueue queue(config);
  EXPECT_EQ(queue.admitDirect("a", 0, 10), "a");
  EXPECT_EQ(queue.admitDirect("b", 0, 10), std::string(kOverflowTenant));
  EXPECT_EQ(queue.admitDirect("c", 0, 10), std::string(kOverflowTenant));
  EXPECT_DOUBLE_EQ(*queue.counter(std::string(kOverflowTenant), 0), 20);
  EXPECT_EQ(queue.tenantCount(), 1u);
  EXPECT_EQ(queue.admitDirect("a", 7, 10), "a");  // an unknown class changes nothing
}

// Ensures an idle fleet serving many tenants straight through keeps giving each new tenant its own flow: with
// nothing ever backlogged the floor never rises, so without taking idle flows' places the first max_tenants
// tenants would be tracked for good and every later one would share the overflow flow.
TEST(FairQueueDirect, NewTenantsTakeIdleTenantsPlacesAtTheCap) {
  FairQueue queue(oneClass());  // max_tenants: the default
  const size_t cap = oneClass().max_tenants;
  for (size_t i = 0; i < 2 * cap; ++i) {
    const std::string tenant = "tenant-" + std::to_string(i);
    ASSERT_EQ(queue.admitDirect(tenant, 0, 10 + i % 7), tenant) << i;
    queue.finished(tenant, 0);
    ASSERT_LE(queue.tenantCount(), cap);
  }
  EXPECT_LE(queue.flowCount(), cap);
  EXPECT_FALSE(queue.counter(std::string(kOverflowTenant), 0));
}

// Ensures the flow forgotten to make a place is the idle one nearest the floor, an active flow is never taken,
// and the floor rises to the forgotten counter (its service still counts against whoever joins next).
TEST(FairQueueDirect, ThePlaceTakenIsTheIdleFlowNearestTheFloor) {
  FlowConfig config = oneClass();
  config.max_tenants = 3;
  FairQueue queue(config);
  queue.admitDirect("busy", 0, 5);  // stays in flight
  queue.admitDirect("light", 0, 10);
  queue.admitDirect("heavy", 0, 1000);
  queue.finished("light", 0);
  queue.finished("heavy", 0);
  EXPECT_EQ(queue.admitDirect("new", 0, 1), "new");
  EXPECT_FALSE(queue.counter("light", 0));
  EXPECT_DOUBLE_EQ(*queue.counter("heavy", 0), 1000);
  EXPECT_DOUBLE_EQ(*queue.counter("busy", 0), 5);
  EXPECT_DOUBLE_EQ(*queue.counter("new", 0), 11);  // lifted to light's 10 first
  // Every tracked tenant active: the next one is counted in the overflow flow.
  queue.admitDirect("heavy", 0, 1);
  EXPECT_EQ(queue.admitDirect("late", 0, 1), std::string(kOverflowTenant));
  // A queued request takes a place the same way once one is idle again.
  queue.finished("new", 0);
  ASSERT_TRUE(queue.enqueue(item(1, "queued")).queued());
  EXPECT_EQ(queue.enqueue(item(2, "queued")).flow, "queued");
  EXPECT_FALSE(queue.counter("new", 0));
  EXPECT_EQ(queue.tenantCount(), 3u);
}

// Ensures the in-flight counts per tenant and in all follow dispatches, direct admissions and ends, and that
// othersActive sees another tenant's queued or in-flight requests but not the tenant's own.
TEST(FairQueueDirect, InFlightCountsAndOtherTenantsActivity) {
  FairQueue queue(oneClass());
  queue.admitDirect("a", 0, 10);
  queue.admitDirect("a", 0, 10);
  EXPECT_EQ(queue.tenantInFlight("a"), 2u);
  EXPECT_EQ(queue.inFlight(), 2u);
  EXPECT_FALSE(queue.othersActive("a"));
  EXPECT_TRUE(queue.othersActive("b"));
  ASSERT_TRUE(queue.enqueue(item(1, "b")).queued());
  EXPECT_TRUE(queue.othersActive("a"));
  EXPECT_EQ(queue.popNext()->tenant, "b");
  EXPECT_EQ(queue.tenantInFlight("b"), 1u);
  EXPECT_EQ(queue.inFlight(), 3u);
  queue.finished("b", 0);
  EXPECT_FALSE(queue.othersActive("a"));
  queue.finished("a", 0);
  queue.finished("a", 0);
  queue.finished("a", 0);  // one too many: ignored
  EXPECT_EQ(queue.inFlight(), 0u);
  EXPECT_EQ(queue.tenantInFlight("a"), 0u);
}

// Ensures popNext passes over a flow its predicate refuses, keeping its place, takes the next one, and returns
// nothing when every backlogged flow is refused.
TEST(FairQueueDirect, PopNextPassesOverIneligibleTenants) {
  FairQueue queue(oneClass());
  ASSERT_TRUE(queue.enqueue(item(1, "flood")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "flood")).queued());
  ASSERT_TRUE(queue.enqueue(item(3, "steady")).queued());
  auto not_flood = [](const std::string& tenant) { return tenant != "flood"; };
  EXPECT_EQ(queue.popNext(not_flood)->tenant, "steady");
  EXPECT_FALSE(queue.popNext(not_flood));
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.popNext()->id, 1u);  // its place was kept
}

}  // namespace
}  // namespace prefixgate::flow
