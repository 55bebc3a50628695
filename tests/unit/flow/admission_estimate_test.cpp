#include "flow/admission_estimate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "flow/fair_queue.h"

namespace prefixgate::flow {
namespace {

// Ensures the hold time predicts nothing until it has seen enough requests, then follows the recent ones.
TEST(RecentMean, UnknownUntilEnoughSamplesThenAWeightedMean) {
  RecentMean hold;
  hold.add(1000);
  hold.add(1000);
  EXPECT_EQ(hold.ms(), 0);  // two samples: not yet
  hold.add(1000);
  EXPECT_DOUBLE_EQ(hold.ms(), 1000);
  for (int i = 0; i < 100; ++i) hold.add(200);
  EXPECT_NEAR(hold.ms(), 200, 1);
  hold.add(NAN);
  hold.add(-5);
  EXPECT_NEAR(hold.ms(), 200, 1);  // nonsense is ignored
  EXPECT_EQ(hold.samples(), 103u);
}

// Ensures the queue wait counts the ends the request needs (those ahead, itself, and any room already overdrawn)
// spread over every slot, and is 0 when it would go at once or nothing is known.
TEST(PredictedQueueWait, EndsNeededOverCapacity) {
  // 7 ahead, no room: 8 ends at 4 slots x 1000 ms each -> 2000 ms.
  EXPECT_DOUBLE_EQ(predictedQueueWaitMs(7, 0, 4, 1000), 2000);
  // Room overdrawn by 4 (more in flight than the limits): 4 more ends first.
  EXPECT_DOUBLE_EQ(predictedQueueWaitMs(7, -4, 4, 1000), 3000);
  // Room for everything ahead and itself: it goes at once.
  EXPECT_DOUBLE_EQ(predictedQueueWaitMs(2, 3, 4, 1000), 0);
  EXPECT_DOUBLE_EQ(predictedQueueWaitMs(7, 0, 0, 1000), 0);  // no ready pod: routing answers, not the queue
  EXPECT_DOUBLE_EQ(predictedQueueWaitMs(7, 0, 4, 0), 0);     // hold time not learned yet
}

// Ensures a request is refused at admission only when even the soonest it could be answered is past its objective,
// and that it may wait only as long as leaves the fastest pod time to answer.
TEST(CheckObjective, RefusesOnlyWhatCannotBeMet) {
  ObjectiveCheck tight = checkObjective(500, 450, 100);
  EXPECT_FALSE(tight.reachable);
  EXPECT_DOUBLE_EQ(tight.predicted_ms, 550);
  ObjectiveCheck fits = checkObjective(500, 300, 100);
  EXPECT_TRUE(fits.reachable);
  EXPECT_DOUBLE_EQ(fits.queue_budget_ms, 400);
  EXPECT_FALSE(checkObjective(80, 0, 100).reachable);  // no pod answers that fast, even with no queue
  // The wait allowed leaves the typical answer time, not only the lower bound; a typical time below it is ignored.
  EXPECT_DOUBLE_EQ(checkObjective(500, 300, 100, 250).queue_budget_ms, 250);
  EXPECT_TRUE(checkObjective(500, 300, 100, 250).reachable);  // refused only on the lower bounds
  EXPECT_TRUE(checkObjective(500, 0, 100, 700).reachable);     // even when the typical time is past the objective
  EXPECT_LT(checkObjective(500, 0, 100, 700).queue_budget_ms, 0);
  EXPECT_DOUBLE_EQ(checkObjective(500, 300, 100, 50).queue_budget_ms, 400);
  EXPECT_TRUE(checkObjective(0, 1e9, 1e9).reachable);  // no objective: never refused
}

// Ensures queuedAhead counts exactly what certainly goes first: higher classes and the tenant's own queued
// requests, not other tenants of its class (their counters decide).
TEST(FairQueueAhead, HigherClassesAndTheFlowsOwnOnly) {
  FlowConfig config;
  config.enabled = true;
  config.classes = {ClassSpec{"high"}, ClassSpec{"low"}};
  FairQueue queue(config);
  uint64_t id = 1;
  auto add = [&](const std::string& tenant, size_t class_index) {
    ASSERT_TRUE(queue.enqueue({id++, tenant, class_index, 10, 100, 0, 1'000'000}).queued());
  };
  add("a", 0);
  add("a", 0);
  add("b", 0);
  add("a", 1);
  add("c", 1);
  add("c", 1);
  EXPECT_EQ(queue.queuedAhead("a", 0), 2u);  // its own two
  EXPECT_EQ(queue.queuedAhead("z", 0), 0u);  // an unknown tenant: nothing certain
  EXPECT_EQ(queue.queuedAhead("a", 1), 4u);  // three high + its own low one
  EXPECT_EQ(queue.queuedAhead("c", 1), 5u);  // three high + its own two
  EXPECT_EQ(queue.queuedAhead("b", 1), 3u);
  queue.popNext();
  EXPECT_EQ(queue.queuedAhead("c", 1), 4u);
}

}  // namespace
}  // namespace prefixgate::flow
