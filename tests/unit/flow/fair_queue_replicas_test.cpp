// FairQueue's side of sharing VTC service between gateway replicas (docs/flow-control.md, "Replicas"):
// localService() says what this queue served, chargeRemote() adds what another replica served.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "flow/fair_queue.h"
#include "unit/flow/drain.h"

namespace prefixgate::flow {
namespace {

constexpr int64_t kFar = 1'000'000'000;

FlowConfig oneClass() {
  FlowConfig config;
  config.enabled = true;
  config.max_queued_total = 1'000'000;
  config.max_queued_per_tenant = 1'000'000;
  config.max_tenants = 1'000'000;
  return config;
}

QueuedItem item(uint64_t id, std::string tenant, uint64_t prompt_tokens = 100) {
  return QueuedItem{id, std::move(tenant), 0, 10, prompt_tokens, 0, kFar};
}

using testing::drainTenants;

// Ensures a tenant served a lot on another replica goes after one that was not, and that without the remote
// charge the same queue alternates (the check fails without sharing).
TEST(FairQueueReplicas, RemoteServiceOrdersTenants) {
  for (const bool shared : {false, true}) {
    FairQueue queue(oneClass());
    uint64_t id = 0;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(queue.enqueue(item(++id, "A")).queued());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(queue.enqueue(item(++id, "B")).queued());
    if (shared) queue.chargeRemote("A", 0, 10'000);
    EXPECT_EQ(drainTenants(queue), shared ? "BBBAAA" : "ABABAB") << shared;
  }
}

// Ensures the local total counts prompt tokens x input weight at dispatch and output tokens x output weight, but
// never remote service (which would echo between replicas), and that it goes when the flow is forgotten.
TEST(FairQueueReplicas, LocalServiceCountsOnlyWhatThisQueueServed) {
  FlowConfig config = oneClass();
  config.input_token_weight = 1;
  config.output_token_weight = 3;
  FairQueue queue(config);
  ASSERT_TRUE(queue.enqueue(item(1, "A", 100)).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "A", 50)).queued());
  ASSERT_EQ(queue.localService(10).size(), 1u);  // queued, not served: listed at 0
  EXPECT_EQ(queue.localService(10)[0].total, 0.0);
  ASSERT_TRUE(queue.popNext());
  queue.charge("A", 0, 10);
  queue.chargeRemote("A", 0, 5000);
  std::vector<LocalService> service = queue.localService(10);
  ASSERT_EQ(service.size(), 1u);
  EXPECT_EQ(service[0].tenant, "A");
  EXPECT_EQ(service[0].class_index, 0u);
  EXPECT_EQ(service[0].total, 130.0);
  EXPECT_EQ(service[0].flow_seq, 0u);
  EXPECT_EQ(queue.counter("A", 0), 5130.0);
  queue.finished("A", 0);
  ASSERT_TRUE(queue.popNext());
  queue.finished("A", 0);  // idle, and the last to leave: at the floor, forgotten
  EXPECT_FALSE(queue.counter("A", 0));
  EXPECT_TRUE(queue.localService(10).empty());
  EXPECT_EQ(queue.flowsCreated(), 1u);
  ASSERT_TRUE(queue.enqueue(item(3, "A")).queued());
  ASSERT_TRUE(queue.popNext());
  service = queue.localService(10);
  ASSERT_EQ(service.size(), 1u);
  EXPECT_EQ(service[0].total, 100.0);  // a new flow: its total starts again
  EXPECT_EQ(service[0].flow_seq, 1u);
}

// Ensures the list is bounded and the most recently served flow comes first.
TEST(FairQueueReplicas, LocalServiceMostRecentFirstAndBounded) {
  FairQueue queue(oneClass());
  uint64_t id = 0;
  for (const char* tenant : {"A", "B", "C", "D"}) ASSERT_TRUE(queue.enqueue(item(++id, tenant)).queued());
  ASSERT_TRUE(queue.enqueue(item(++id, "E")).queued());  // never served: listed last, at 0
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(queue.popNext());  // A B C D, all in flight
  queue.charge("B", 0, 1);                                   // B served last
  std::vector<LocalService> service = queue.localService(3);
  ASSERT_EQ(service.size(), 3u);
  EXPECT_EQ(service[0].tenant, "B");
  EXPECT_EQ(service[1].tenant, "D");
  EXPECT_EQ(service[2].tenant, "C");
  ASSERT_EQ(queue.localService(100).size(), 5u);
  EXPECT_EQ(queue.localService(100)[4].tenant, "E");
  EXPECT_EQ(queue.localService(100)[4].total, 0.0);
  EXPECT_TRUE(queue.localService(0).empty());
}

// Ensures remote service reaches only flows tracked now, ignores amounts that are not finite or not above zero,
// and clamps huge ones.
TEST(FairQueueReplicas, ChargeRemoteOnlyTrackedAndSane) {
  FairQueue queue(oneClass());
  queue.chargeRemote("ghost", 0, 100);  // not tracked: dropped, nothing created
  EXPECT_EQ(queue.flowCount(), 0u);
  ASSERT_TRUE(queue.enqueue(item(1, "A")).queued());
  queue.chargeRemote("A", 7, 100);  // unknown class
  for (const double bad : {-5.0, 0.0, std::nan(""), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()})
    queue.chargeRemote("A", 0, bad);
  EXPECT_EQ(queue.counter("A", 0), 0.0);
  queue.chargeRemote("A", 0, 1e300);
  EXPECT_EQ(queue.counter("A", 0), kMaxRemoteCharge);
}

// Ensures a remote charge keeps the invariants: an idle flow above the floor moves in the idle set, a flow that
// the floor reaches is forgotten, and a returning one is lifted to a floor that never decreased.
TEST(FairQueueReplicas, ChargeRemoteKeepsFloorInvariants) {
  FairQueue queue(oneClass());
  ASSERT_TRUE(queue.enqueue(item(1, "A")).queued());
  ASSERT_TRUE(queue.enqueue(item(2, "B")).queued());
  ASSERT_TRUE(queue.popNext());  // A: 100, in flight
  queue.chargeRemote("A", 0, 1000);  // in flight only: 1100
  queue.finished("A", 0);            // idle above the floor (B's 0): kept
  EXPECT_EQ(queue.counter("A", 0), 1100.0);
  queue.chargeRemote("A", 0, 400);  // idle: re-keyed at 1500
  ASSERT_TRUE(queue.enqueue(item(3, "B", 2000)).queued());
  ASSERT_TRUE(queue.popNext());      // B: 100
  ASSERT_TRUE(queue.popNext());      // B: 2100, the last to leave: floor 2100 passes A's 1500
  EXPECT_FALSE(queue.counter("A", 0));  // forgotten: the lift would take it to the floor anyway
  queue.chargeRemote("B", 0, 50);        // in flight: 2150
  ASSERT_TRUE(queue.enqueue(item(4, "A")).queued());
  EXPECT_EQ(queue.counter("A", 0), 2100.0);  // lifted to the floor, which never went down
  EXPECT_EQ(queue.counter("B", 0), 2150.0);
  // A backlogged flow charged remotely is re-keyed: C, queued after A, now goes first.
  ASSERT_TRUE(queue.enqueue(item(5, "C")).queued());
  queue.chargeRemote("A", 0, 1);
  EXPECT_EQ(queue.popNext()->tenant, "C");
}

}  // namespace
}  // namespace prefixgate::flow
