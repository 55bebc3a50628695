#include "flow/fair_queue.h"
#include "unit/flow/drain.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace prefixgate::flow {
namespace {

constexpr int64_t kFar = 1'000'000'000;  // a deadline no test reaches

// Two classes, highest first, and bounds no test reaches unless it lowers them.
FlowConfig twoClasses() {
  FlowConfig config;
  config.enabled = true;
  config.classes = {ClassSpec{"high"}, ClassSpec{"low"}};
  config.max_queued_total = 1'000'000;
  config.max_queued_per_tenant = 1'000'000;
  config.max_queued_bytes_total = size_t{1} << 40;
  config.max_queued_bytes_per_tenant = size_t{1} << 40;
  config.max_tenants = 1'000'000;
  return config;
}

QueuedItem item(uint64_t id, std::string tenant, size_t class_index = 0, uint64_t prompt_tokens = 100,
                size_t bytes = 100, int64_t deadline_ms = kFar) {
  return QueuedItem{id, std::move(tenant), class_index, bytes, prompt_tokens, 0, deadline_ms};
}

using testing::drainTenants;

std::vector<uint64_t> drainIds(FairQueue& queue) {
  std::vector<uint64_t> ids;
  while (auto next = queue.popNext()) ids.push_back(next->id);
  return ids;
}

// Ensures every queued item of a higher class goes before any of a lower class, whatever the counters.
TEST(FairQueue, StrictPriorityBetweenClasses) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "L", 1, 1)).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "H", 0, 100000)).queued());
  ASSERT_TRUE(queue.enqueue(item(3, "H", 0, 100000)).queued());
  ASSERT_TRUE(queue.enqueue(item(4, "L", 1, 1)).queued());
  EXPECT_EQ(drainIds(queue), (std::vector<uint64_t>{2, 3, 1, 4}));
}

// Ensures tenants share by tokens, not requests: a tenant sending 300-token prompts gets one dispatch for every
// three of a tenant sending 100-token prompts.
TEST(FairQueue, VtcSharesByPromptTokens) {
  FairQueue queue(twoClasses());
  uint64_t id = 0;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(queue.enqueue(item(++id, "H", 0, 300)).queued());
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(queue.enqueue(item(++id, "L", 0, 100)).queued());
  // Ties go to the earlier-queued head, which is H's throughout.
  EXPECT_EQ(drainTenants(queue), "HLLLHLLLHLLLHLLL");
}

// Ensures output tokens charged at completion count, at the output weight (2 per token by default).
TEST(FairQueue, VtcChargesOutputTokens) {
  FairQueue queue(twoClasses());
  uint64_t id = 0;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(queue.enqueue(item(++id, "A", 0, 100)).queued());
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(queue.enqueue(item(++id, "B", 0, 100)).queued());
  std::string order;
  while (auto next = queue.popNext()) {
    order += next->tenant;
    // A's answers are 100 tokens long (100 x 2 = 200 more), B's empty: A costs 300 a request, B 100.
    if (next->tenant == "A") queue.charge("A", 0, 100);
    queue.finished(next->tenant, 0);
  }
  EXPECT_EQ(order, "ABBBABBBABBB");
}

// Ensures the counter grows by prompt x input weight at dispatch and output x output weight at charge().
TEST(FairQueue, CounterUsesConfiguredWeights) {
  FlowConfig config = twoClasses();
  config.input_token_weight = 3;
  config.output_token_weight = 5;
  FairQueue queue(config);
  ASSERT_TRUE(queue.enqueue(item(1, "A", 0, 10)).queued());
  EXPECT_EQ(queue.counter("A", 0), 0.0);
  ASSERT_TRUE(queue.popNext());
  EXPECT_EQ(queue.counter("A", 0), 30.0);
  queue.charge("A", 0, 7);
  EXPECT_EQ(queue.counter("A", 0), 65.0);
}

// Ensures equal counters go to the tenant whose oldest item was queued first.
TEST(FairQueue, TiesGoToEarlierHead) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "B")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "A")).queued());
  EXPECT_EQ(drainTenants(queue), "BA");
}

// Ensures one tenant's items leave in the order they came, also after a cancel in the middle.
TEST(FairQueue, FifoWithinTenant) {
  FairQueue queue(twoClasses());
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(queue.enqueue(item(id, "A", 0, 100 * id)).queued());
  ASSERT_TRUE(queue.cancel(3));
  EXPECT_EQ(drainIds(queue), (std::vector<uint64_t>{1, 2, 4, 5}));
}

// Ensures a tenant returning after idling is lifted to the smallest backlogged counter: it does not get a burst
// of dispatches for the time it was away, it alternates with the tenant that stayed.
TEST(FairQueue, ReturningTenantLiftedToBacklogMinimum) {
  FairQueue queue(twoClasses());
  uint64_t id = 0;
  ASSERT_TRUE(queue.enqueue(item(++id, "A")).queued());
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(queue.enqueue(item(++id, "B")).queued());
  auto first = queue.popNext();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->tenant, "A");
  queue.finished("A", 0);  // A is now idle at 100
  for (int i = 0; i < 10; ++i) {
    auto next = queue.popNext();
    ASSERT_TRUE(next);
    EXPECT_EQ(next->tenant, "B");
    queue.finished("B", 0);
  }
  ASSERT_EQ(queue.counter("B", 0), 1000.0);  // B still has items queued
  ASSERT_TRUE(queue.enqueue(item(++id, "A")).queued());
  EXPECT_EQ(queue.counter("A", 0), 1000.0);
  std::string order;
  for (int i = 0; i < 4; ++i) {
    auto next = queue.popNext();
    ASSERT_TRUE(next);
    order += next->tenant;
  }
  // B's head was queued before A's new item, so B wins the tie. Without the lift: AAAA...
  EXPECT_EQ(order, "BABB");
}

// Ensures that with nobody backlogged a tenant arriving is lifted to the counter of the last tenant to leave
// the backlog (the paper's rule), so an idle tenant does not overtake one that has just been served.
TEST(FairQueue, ArrivalIntoEmptyQueueLiftedToLastLeaver) {
  FairQueue queue(twoClasses());
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(queue.enqueue(item(id, "A")).queued());
  drainIds(queue);  // A's items stay in flight, so its counter is kept
  ASSERT_EQ(queue.counter("A", 0), 500.0);
  ASSERT_TRUE(queue.enqueue(item(6, "B")).queued());
  EXPECT_EQ(queue.counter("B", 0), 500.0);
}

// Ensures classes keep separate counters: serving a tenant in one class does not lower its share in another.
TEST(FairQueue, CountersArePerClass) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "A", 0, 1000)).queued());
  ASSERT_TRUE(queue.popNext());
  ASSERT_TRUE(queue.enqueue(item(2, "A", 1)).queued());
  EXPECT_EQ(queue.counter("A", 0), 1000.0);
  EXPECT_EQ(queue.counter("A", 1), 0.0);
}

// Ensures a tenant over its own count bound is shed with tenant_queue_full (429) and nothing else changes.
TEST(FairQueue, TenantCountBound) {
  FlowConfig config = twoClasses();
  config.max_queued_per_tenant = 2;
  FairQueue queue(config);
  ASSERT_TRUE(queue.enqueue(item(1, "A")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "A", 1)).queued());  // the bound is per tenant, over its classes
  const EnqueueResult shed = queue.enqueue(item(3, "A"));
  ASSERT_EQ(shed.shed, ShedReason::kTenantQueueFull);
  EXPECT_EQ(shed.reasonLabel(), "tenant_queue_full");
  EXPECT_EQ(httpStatus(*shed.shed), 429);
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.bytes(), 200u);
  EXPECT_TRUE(queue.enqueue(item(4, "B")).queued());
  EXPECT_EQ(drainIds(queue), (std::vector<uint64_t>{1, 4, 2}));
}

// Ensures a tenant over its own byte bound is shed with tenant_queue_full and others still get in.
TEST(FairQueue, TenantBytesBound) {
  FlowConfig config = twoClasses();
  config.max_queued_bytes_per_tenant = 1000;
  FairQueue queue(config);
  ASSERT_TRUE(queue.enqueue(item(1, "A", 0, 100, 600)).queued());
  EXPECT_EQ(queue.enqueue(item(2, "A", 0, 100, 401)).shed, ShedReason::kTenantQueueFull);
  EXPECT_TRUE(queue.enqueue(item(3, "A", 0, 100, 400)).queued());  // exactly at the bound
  EXPECT_TRUE(queue.enqueue(item(4, "B", 0, 100, 1000)).queued());
  EXPECT_EQ(queue.bytes(), 2000u);
}

// Ensures a full total queue sheds with queue_full (503), even for a tenant well within its own bound.
TEST(FairQueue, TotalCountBound) {
  FlowConfig config = twoClasses();
  config.max_queued_total = 3;
  config.max_queued_per_tenant = 2;
  FairQueue queue(config);
  ASSERT_TRUE(queue.enqueue(item(1, "A")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "A")).queued());
  ASSERT_TRUE(queue.enqueue(item(3, "B")).queued());
  const EnqueueResult shed = queue.enqueue(item(4, "C"));
  ASSERT_EQ(shed.shed, ShedReason::kQueueFull);
  EXPECT_EQ(shed.reasonLabel(), "queue_full");
  EXPECT_EQ(httpStatus(*shed.shed), 503);
  EXPECT_EQ(queue.tenantCount(), 2u);  // a shed newcomer is not tracked
  // A tenant over its own bound while the queue is full is told it is over its quota.
  EXPECT_EQ(queue.enqueue(item(5, "A")).shed, ShedReason::kTenantQueueFull);
  EXPECT_EQ(drainIds(queue), (std::vector<uint64_t>{1, 3, 2}));
}

// Ensures a full total byte bound sheds with queue_full.
TEST(FairQueue, TotalBytesBound) {
  FlowConfig config = twoClasses();
  config.max_queued_bytes_total = 1000;
  FairQueue queue(config);
  ASSERT_TRUE(queue.enqueue(item(1, "A", 0, 100, 900)).queued());
  EXPECT_EQ(queue.enqueue(item(2, "B", 0, 100, 101)).shed, ShedReason::kQueueFull);
  EXPECT_TRUE(queue.enqueue(item(3, "B", 0, 100, 100)).queued());
  EXPECT_EQ(queue.size(), 2u);
}

// Ensures an unknown class or an id already queued is refused as the caller's bug, changing nothing.
TEST(FairQueue, InvalidItems) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "A")).queued());
  EXPECT_EQ(queue.enqueue(item(1, "B")).shed, ShedReason::kInvalid);
  EXPECT_EQ(queue.enqueue(item(2, "B", 2)).shed, ShedReason::kInvalid);
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_EQ(queue.tenantCount(), 1u);
}

// Ensures a cancelled item leaves at once (count, bytes, order) and cancelling the gone or unknown is false.
TEST(FairQueue, Cancel) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "A", 0, 100, 10)).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "B", 0, 100, 20)).queued());
  ASSERT_TRUE(queue.enqueue(item(3, "A", 0, 100, 30)).queued());
  EXPECT_TRUE(queue.cancel(1));
  EXPECT_EQ(queue.size(), 2u);
  EXPECT_EQ(queue.bytes(), 50u);
  EXPECT_FALSE(queue.cancel(1));
  EXPECT_FALSE(queue.cancel(99));
  // A's head is now item 3, queued after B's: B goes first.
  auto next = queue.popNext();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->id, 2u);
  EXPECT_FALSE(queue.cancel(2));  // dispatched
  EXPECT_EQ(drainIds(queue), (std::vector<uint64_t>{3}));
}

// Ensures expire() removes exactly the items whose deadline has come, oldest deadline first, and no others.
TEST(FairQueue, Expire) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "A", 0, 100, 100, 300)).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "B", 1, 100, 100, 100)).queued());
  ASSERT_TRUE(queue.enqueue(item(3, "A", 0, 100, 100, 200)).queued());
  EXPECT_TRUE(queue.expire(99).empty());
  std::vector<QueuedItem> gone = queue.expire(200);
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].id, 2u);
  EXPECT_EQ(gone[1].id, 3u);
  EXPECT_EQ(queue.size(), 1u);
  EXPECT_EQ(queue.bytes(), 100u);
  EXPECT_FALSE(queue.cancel(3));
  EXPECT_EQ(reasonLabel(ShedReason::kTimeout), "timeout");
  EXPECT_EQ(httpStatus(ShedReason::kTimeout), 503);
  EXPECT_EQ(drainIds(queue), (std::vector<uint64_t>{1}));
}

// Ensures an item whose deadline is already past when queued is shed with timeout.
TEST(FairQueue, DeadOnArrival) {
  FairQueue queue(twoClasses());
  QueuedItem late = item(1, "A");
  late.enqueued_ms = 500;
  late.deadline_ms = 500;
  EXPECT_EQ(queue.enqueue(late).shed, ShedReason::kTimeout);
  EXPECT_EQ(queue.size(), 0u);
}

// Ensures tenants beyond max_tenants share the overflow flow `_other`, under its own per-tenant bound, while
// tracked tenants are unaffected.
TEST(FairQueue, TenantCapOverflow) {
  FlowConfig config = twoClasses();
  config.max_tenants = 2;
  config.max_queued_per_tenant = 2;
  FairQueue queue(config);
  ASSERT_TRUE(queue.enqueue(item(1, "A")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "B")).queued());
  const EnqueueResult c = queue.enqueue(item(3, "C"));
  ASSERT_TRUE(c.queued());
  EXPECT_EQ(c.flow, kOverflowTenant);
  EXPECT_EQ(queue.enqueue(item(4, "D")).flow, kOverflowTenant);
  const EnqueueResult e = queue.enqueue(item(5, "E"));
  EXPECT_EQ(e.shed, ShedReason::kTenantQueueFull);
  EXPECT_TRUE(queue.enqueue(item(6, "A")).queued());
  EXPECT_EQ(queue.tenantCount(), 2u);
  EXPECT_FALSE(queue.counter("C", 0));
  const QueueSnapshot snapshot = queue.snapshot();
  EXPECT_EQ(snapshot.tenants_tracked, 2u);
  ASSERT_EQ(snapshot.classes[0].tenants.size(), 3u);
  EXPECT_EQ(snapshot.classes[0].tenants[2].tenant, kOverflowTenant);
  EXPECT_EQ(snapshot.classes[0].tenants[2].queued, 2u);
  // Dispatched overflow items name their flow, so output is charged to it.
  std::vector<std::string> flows;
  while (auto next = queue.popNext()) flows.push_back(next->tenant);
  EXPECT_EQ(flows, (std::vector<std::string>{"A", "B", "_other", "_other", "A"}));
  queue.charge("_other", 0, 10);
  EXPECT_EQ(queue.counter("_other", 0), 220.0);
}

// Ensures an idle flow at or below the class floor is forgotten, an in-flight one is not, and a forgotten
// tenant returns with the counter the lift would have given it anyway.
TEST(FairQueue, CountersForgotten) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "A")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "B")).queued());
  ASSERT_TRUE(queue.enqueue(item(3, "B")).queued());
  ASSERT_EQ(queue.popNext()->tenant, "A");  // A: 100, in flight
  ASSERT_EQ(queue.popNext()->tenant, "B");  // B: 100
  ASSERT_EQ(queue.popNext()->tenant, "B");  // B: 200, the last to leave: the floor is 200
  EXPECT_EQ(queue.counter("A", 0), 100.0);  // below the floor but in flight: kept
  queue.finished("A", 0);
  EXPECT_FALSE(queue.counter("A", 0));  // idle at or below the floor: forgotten
  queue.charge("B", 0, 50);             // B: 300, above the floor it set
  queue.finished("B", 0);
  queue.finished("B", 0);
  EXPECT_EQ(queue.counter("B", 0), 300.0);  // idle but above the floor: kept (forgetting would give it credit)
  EXPECT_EQ(queue.tenantCount(), 1u);
  ASSERT_TRUE(queue.enqueue(item(4, "A")).queued());
  EXPECT_EQ(queue.counter("A", 0), 200.0);
  ASSERT_TRUE(queue.enqueue(item(5, "C", 0, 500)).queued());
  ASSERT_EQ(queue.popNext()->tenant, "A");  // A: 300
  ASSERT_EQ(queue.popNext()->tenant, "C");  // C: 700, last to leave: floor 700 >= B's 300
  EXPECT_FALSE(queue.counter("B", 0));
  EXPECT_EQ(queue.flowCount(), 2u);  // A and C, in flight
}

// Ensures a flood of 100,000 distinct tenant names, each served, keeps the tenants tracked bounded and small,
// and that none of them needed the overflow flow.
TEST(FairQueue, FloodOfServedTenantsStaysBounded) {
  FlowConfig config = twoClasses();
  config.max_tenants = 1000;
  FairQueue queue(config);
  size_t most_tracked = 0;
  for (uint64_t i = 0; i < 100'000; ++i) {
    const EnqueueResult result = queue.enqueue(item(i, "tenant-" + std::to_string(i), i % 2));
    ASSERT_TRUE(result.queued());
    ASSERT_NE(result.flow, kOverflowTenant) << i;
    auto next = queue.popNext();
    ASSERT_TRUE(next);
    queue.charge(next->tenant, next->class_index, 50);
    queue.finished(next->tenant, next->class_index);
    most_tracked = std::max(most_tracked, queue.flowCount());
  }
  EXPECT_LE(most_tracked, 8u);
  EXPECT_LE(queue.tenantCount(), 8u);
}

// Ensures a flood of 100,000 distinct tenant names that are never served is held to max_tenants tracked
// tenants plus `_other`, with the rest shed, and that draining it forgets every counter.
TEST(FairQueue, FloodOfQueuedTenantsStaysBounded) {
  FlowConfig config = twoClasses();
  config.max_tenants = 1000;
  config.max_queued_per_tenant = 1000;
  FairQueue queue(config);
  size_t shed = 0;
  for (uint64_t i = 0; i < 100'000; ++i) {
    const EnqueueResult result = queue.enqueue(item(i, "tenant-" + std::to_string(i)));
    if (!result.queued()) {
      ++shed;
      ASSERT_EQ(result.shed, ShedReason::kTenantQueueFull);
    }
  }
  EXPECT_EQ(queue.tenantCount(), 1000u);
  EXPECT_EQ(queue.flowCount(), 1001u);
  EXPECT_EQ(queue.size(), 2000u);
  EXPECT_EQ(shed, 98'000u);
  drainTenants(queue);
  EXPECT_EQ(queue.flowCount(), 0u);
  EXPECT_EQ(queue.tenantCount(), 0u);
}

// Ensures the snapshot reports per class and per tenant queued items, bytes, counters and in-flight counts.
TEST(FairQueue, Snapshot) {
  FairQueue queue(twoClasses());
  ASSERT_TRUE(queue.enqueue(item(1, "B", 0, 100, 10)).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "A", 0, 100, 20)).queued());
  ASSERT_TRUE(queue.enqueue(item(3, "A", 1, 100, 40)).queued());
  ASSERT_TRUE(queue.popNext());  // B, now in flight at 100
  const QueueSnapshot s = queue.snapshot();
  EXPECT_EQ(s.queued, 2u);
  EXPECT_EQ(s.bytes, 60u);
  EXPECT_EQ(s.tenants_tracked, 2u);
  ASSERT_EQ(s.classes.size(), 2u);
  EXPECT_EQ(s.classes[0].name, "high");
  EXPECT_EQ(s.classes[0].queued, 1u);
  EXPECT_EQ(s.classes[0].bytes, 20u);
  ASSERT_EQ(s.classes[0].tenants.size(), 2u);
  EXPECT_EQ(s.classes[0].tenants[0].tenant, "A");
  EXPECT_EQ(s.classes[0].tenants[0].queued, 1u);
  EXPECT_EQ(s.classes[0].tenants[1].tenant, "B");
  EXPECT_EQ(s.classes[0].tenants[1].counter, 100.0);
  EXPECT_EQ(s.classes[0].tenants[1].in_flight, 1u);
  EXPECT_EQ(s.classes[1].bytes, 40u);
  ASSERT_EQ(s.classes[1].tenants.size(), 1u);
}

}  // namespace
}  // namespace prefixgate::flow
