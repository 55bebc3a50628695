// newPromptMatch: a request's PromptMatch is recycled on its thread once its last holder lets go, and comes back
// empty (nothing of the last request's prompt or matches) with its vectors' memory.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "routing/prefix/prefix_services.h"
#include "util/thread_spares.h"

namespace prefixgate::routing {
namespace {

void drainSpares() {
  std::unique_ptr<PromptMatch> m;
  while (util::ThreadSpares<std::unique_ptr<PromptMatch>>::take(m)) {
  }
}

TEST(PromptMatchRecycling, ComesBackEmptyWithItsMemoryOnlyAfterTheLastHolder) {
  drainSpares();
  std::shared_ptr<PromptMatch> first = newPromptMatch();
  first->prompt.hashes.assign(100, BlockHash{42});
  first->prompt.tokens = 6400;
  first->prompt.usable = false;
  first->prompt.other_cuts.emplace_back();
  first->matched.assign(8, 3);
  first->pods.assign(8, PodId{1});
  const PromptMatch* object = first.get();
  const BlockHash* hashes = first->prompt.hashes.data();
  const uint32_t* matched = first->matched.data();

  std::shared_ptr<PromptMatch> holder = first;  // a failover keeps the decision's match
  first.reset();
  std::shared_ptr<PromptMatch> other = newPromptMatch();
  EXPECT_NE(other.get(), object);  // still held: not handed out
  EXPECT_EQ(holder->prompt.hashes.size(), 100u);
  holder.reset();

  std::shared_ptr<PromptMatch> again = newPromptMatch();
  ASSERT_EQ(again.get(), object);
  EXPECT_TRUE(again->prompt.hashes.empty());
  EXPECT_EQ(again->prompt.hashes.data(), hashes);  // the same memory, no allocation
  EXPECT_EQ(again->matched.data(), matched);
  EXPECT_TRUE(again->matched.empty());
  EXPECT_TRUE(again->pods.empty());
  EXPECT_TRUE(again->prompt.other_cuts.empty());
  EXPECT_EQ(again->prompt.tokens, 0u);
  EXPECT_TRUE(again->prompt.usable);
}

TEST(PromptMatchRecycling, AMatchReleasedOnAnotherThreadJoinsThatThreadsSpares) {
  drainSpares();
  std::shared_ptr<PromptMatch> m = newPromptMatch();
  m->prompt.hashes.assign(10, BlockHash{1});
  bool kept_there = false;
  std::thread other([&] {
    m.reset();
    std::unique_ptr<PromptMatch> spare;
    kept_there = util::ThreadSpares<std::unique_ptr<PromptMatch>>::take(spare) && spare->prompt.hashes.empty();
  });
  other.join();
  EXPECT_TRUE(kept_there);
  std::unique_ptr<PromptMatch> spare;
  EXPECT_FALSE(util::ThreadSpares<std::unique_ptr<PromptMatch>>::take(spare));  // none came back here
}

}  // namespace
}  // namespace prefixgate::routing
