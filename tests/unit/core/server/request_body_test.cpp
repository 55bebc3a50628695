// Request bodies held in memory (server/request_body.h): a body's buffer grows as its bytes arrive, by doubling,
// bounded by what was announced, and every growth is charged to one gateway-wide budget first.
#include "server/request_body.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "config/config.h"

namespace prefixgate::server {
namespace {

constexpr size_t kPadding = 64;

// Ensures the capacity starts at one step (or the announced length when smaller), doubles, and never passes the
// limit nor stays below what is needed.
TEST(NextBodyCapacity, DoublesFromTheFirstStepUpToTheLimit) {
  EXPECT_EQ(nextBodyCapacity(0, 1, 32u << 20), kFirstBodyStepBytes);
  EXPECT_EQ(nextBodyCapacity(0, 1, 1000), 1000u);
  EXPECT_EQ(nextBodyCapacity(kFirstBodyStepBytes, kFirstBodyStepBytes + 1, 32u << 20), 2 * kFirstBodyStepBytes);
  EXPECT_EQ(nextBodyCapacity(kFirstBodyStepBytes, kFirstBodyStepBytes + 1, 100000), 100000u);
  EXPECT_EQ(nextBodyCapacity(0, 500000, 32u << 20), 500000u);  // what is already there is never refused room
  EXPECT_EQ(nextBodyCapacity(size_t{1} << 62, (size_t{1} << 62) + 1, size_t{3} << 62), size_t{1} << 63);
  // Doubling never overflows: past half the limit, the next capacity is the limit.
  EXPECT_EQ(nextBodyCapacity(size_t{1} << 63, (size_t{1} << 63) + 1, SIZE_MAX), SIZE_MAX);
}

// Ensures a head announcing 32 MiB costs one first step until bytes arrive, and that the body's growth is charged
// before it is allocated (capacity = charge + padding) and released when the request is done.
TEST(BodyCharge, GrowsWithTheBytesAndReleasesWhenDone) {
  BodyBudget budget(1u << 30);
  std::string body;
  {
    BodyCharge charge(budget, kPadding);
    ASSERT_TRUE(charge.reserve(body, 1, 32u << 20));
    EXPECT_EQ(charge.charged(), kFirstBodyStepBytes);
    EXPECT_EQ(budget.held(), kFirstBodyStepBytes);
    EXPECT_GE(body.capacity(), kFirstBodyStepBytes + kPadding);
    EXPECT_LT(body.capacity(), 2 * kFirstBodyStepBytes);
    body.assign(kFirstBodyStepBytes, 'x');
    ASSERT_TRUE(charge.reserve(body, body.size() + 1, 32u << 20));
    EXPECT_EQ(budget.held(), 2 * kFirstBodyStepBytes);
    EXPECT_GE(body.capacity(), 2 * kFirstBodyStepBytes + kPadding);
    ASSERT_TRUE(charge.reserve(body, 10, 32u << 20));  // already room: nothing more
    EXPECT_EQ(budget.held(), 2 * kFirstBodyStepBytes);
  }
  EXPECT_EQ(budget.held(), 0u);
  EXPECT_EQ(budget.refusals(), 0u);
}

// Ensures a growth that does not fit the budget is refused whole (nothing charged, nothing allocated) and counted,
// and that room freed by a finished request is used again.
TEST(BodyCharge, RefusesAGrowthOverTheBudget) {
  BodyBudget budget(100000);
  std::string first_body, second_body;
  auto first = std::make_unique<BodyCharge>(budget, kPadding);
  ASSERT_TRUE(first->reserve(first_body, 90000, 90000));
  EXPECT_EQ(budget.held(), 90000u);
  {
    BodyCharge second(budget, kPadding);
    EXPECT_FALSE(second.reserve(second_body, 1, 90000));
    EXPECT_EQ(second.charged(), 0u);
    EXPECT_EQ(second_body.capacity(), std::string().capacity());
    EXPECT_EQ(budget.refusals(), 1u);
    EXPECT_TRUE(second.reserve(second_body, 1, 10000));  // a small body still fits
  }
  first.reset();
  BodyCharge third(budget, kPadding);
  EXPECT_TRUE(third.reserve(second_body, 1, 90000));
  EXPECT_EQ(budget.held(), kFirstBodyStepBytes);
}

// Ensures the budget is never exceeded, even briefly, when many threads charge and release at once.
TEST(BodyBudget, ConcurrentChargesNeverExceedTheLimit) {
  BodyBudget budget(1000);
  std::atomic<bool> exceeded{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        if (!budget.tryCharge(300)) continue;
        if (budget.held() > 1000) exceeded = true;
        budget.release(300);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(exceeded);
  EXPECT_EQ(budget.held(), 0u);
}

// Ensures Beast's parser appends into the body without reserving the announced length itself.
TEST(GrowingStringBody, AppendsWithoutReservingTheAnnouncedLength) {
  boost::beast::http::request_header<> head;
  std::string body;
  GrowingStringBody::reader reader(head, body);
  boost::beast::error_code ec;
  reader.init(boost::optional<std::uint64_t>(32u << 20), ec);
  ASSERT_FALSE(ec);
  EXPECT_LT(body.capacity(), 1024u);
  const std::string part = "{\"model\":";
  EXPECT_EQ(reader.put(boost::asio::buffer(part), ec), part.size());
  ASSERT_FALSE(ec);
  EXPECT_EQ(body, part);
  reader.finish(ec);
  EXPECT_FALSE(ec);
}

// Ensures limits.max_buffered_body_bytes is read, defaults to 1 GiB, and below limits.max_body_bytes is a problem
// naming the key and why (a body the limits allow could never be read).
TEST(BodyBudgetConfig, ReadDefaultedAndAtLeastOneLargestBody) {
  config::Problems problems;
  config::Config d = config::parseYaml("discovery: {file: pods.yaml}\n", "/etc/pg/gw.yaml", problems);
  EXPECT_EQ(d.limits.max_buffered_body_bytes, uint64_t{1} << 30);
  config::Config c = config::parseYaml(
      "discovery: {file: pods.yaml}\nlimits: {max_body_bytes: 2000000, max_buffered_body_bytes: 1000000}\n",
      "/etc/pg/gw.yaml", problems);
  ASSERT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(c.limits.max_buffered_body_bytes, 1000000u);
  config::validate(c, {"least-request", "prefix-cache", "random"}, problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0], "/etc/pg/gw.yaml: limits.max_buffered_body_bytes: must be at least limits.max_body_bytes "
                         "(2000000)");
}

}  // namespace
}  // namespace prefixgate::server
