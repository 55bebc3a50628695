// Contention between simulated pods on one machine: processor sharing through a file (--shared-cpu: the slowdown
// table, pods of one file seeing each other's work, a dead pod's place taken back, an engine's steps stretched while
// other pods are busy), and steps spent as real CPU time (--burn-cpu: the compute thread, the engine's steps).
#include "engine_sim/shared_cpu.h"

#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <gtest/gtest.h>

#include "engine_sim/engine.h"
#include "engine_sim/tokenizer.h"

namespace prefixgate::sim {
namespace {
namespace asio = boost::asio;

class SharedCpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() /
            ("prefixgate-shared-cpu-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::filesystem::path path_;
};

TEST(SharedCpuTable, SlowdownFollowsTheTableThenProcessorSharing) {
  std::vector<double> table = {1.0, 1.2, 1.7, 2.2};
  EXPECT_DOUBLE_EQ(SharedCpu::slowdownFor(table, 0), 1.0);
  EXPECT_DOUBLE_EQ(SharedCpu::slowdownFor(table, 1), 1.0);
  EXPECT_DOUBLE_EQ(SharedCpu::slowdownFor(table, 2), 1.2);
  EXPECT_DOUBLE_EQ(SharedCpu::slowdownFor(table, 4), 2.2);
  EXPECT_DOUBLE_EQ(SharedCpu::slowdownFor(table, 8), 4.4);  // twice the pods of the table: half the speed again
  EXPECT_DOUBLE_EQ(SharedCpu::slowdownFor({}, 3), 1.0);
}

TEST_F(SharedCpuTest, PodsOfOneFileSeeEachOthersWork) {
  SharedCpu a(path_.string(), {1.0, 1.5, 2.0});
  auto b = std::make_unique<SharedCpu>(path_.string(), std::vector<double>{1.0, 1.5, 2.0});
  EXPECT_EQ(a.busyPods(), 0u);
  EXPECT_DOUBLE_EQ(a.slowdown(), 1.0);
  a.setBusy(true);
  EXPECT_EQ(b->busyPods(), 1u);
  EXPECT_DOUBLE_EQ(a.slowdown(), 1.0);  // alone
  b->setBusy(true);
  EXPECT_EQ(a.busyPods(), 2u);
  EXPECT_DOUBLE_EQ(a.slowdown(), 1.5);
  b->setBusy(false);
  EXPECT_EQ(a.busyPods(), 1u);
  b->setBusy(true);
  b.reset();  // a pod that stops gives its place back, busy or not
  EXPECT_EQ(a.busyPods(), 1u);
  SharedCpu c(path_.string(), {1.0});
  EXPECT_EQ(a.busyPods(), 1u);  // a newcomer starts idle
}

TEST_F(SharedCpuTest, APlaceHeldByAProcessThatDiedIsFreeAgain) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Claims a place, marks it busy and dies without giving it back (SIGKILL in the benchmark's teardown).
    auto* held = new SharedCpu(path_.string(), {1.0});
    held->setBusy(true);
    ::_exit(held->busyPods() == 1 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  // The dead child's flag still reads busy until its place is claimed again; 64 claims prove it is reused.
  std::vector<std::unique_ptr<SharedCpu>> pods;
  for (size_t i = 0; i < SharedCpu::kMaxPods; ++i)
    pods.push_back(std::make_unique<SharedCpu>(path_.string(), std::vector<double>{1.0}));
  EXPECT_EQ(pods.front()->busyPods(), 0u);
  EXPECT_THROW(SharedCpu(path_.string(), {1.0}), std::runtime_error);  // all 64 held by this live process
}

TEST_F(SharedCpuTest, NamesTheFileItCannotOpen) {
  try {
    SharedCpu cpu("/nonexistent-dir/shared", {1.0});
    FAIL() << "opened a file in a missing folder";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--shared-cpu /nonexistent-dir/shared"), std::string::npos) << e.what();
  }
}

// One request's simulated prompt time on an engine sharing the file with `others_busy` pods held busy.
double promptMsBeside(const std::filesystem::path& path, int others_busy) {
  std::vector<std::unique_ptr<SharedCpu>> others;
  for (int i = 0; i < others_busy; ++i) {
    others.push_back(std::make_unique<SharedCpu>(path.string(), std::vector<double>{1.0}));
    others.back()->setBusy(true);
  }
  SimConfig config;
  config.time_scale = 0.0005;  // real waits of microseconds; the simulated times are exact
  config.shared_cpu_file = path.string();
  config.shared_cpu_slowdown = {1.0, 1.25, 3.0};
  asio::io_context io;
  Engine engine(config);
  asio::co_spawn(io, engine.run(), asio::detached);
  auto started = engine.start(io.get_executor(), tokenize(std::string(4000, 'p')), 1);  // 1,000 tokens
  EXPECT_TRUE(started.sequence);
  if (!started.sequence) return 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!started.sequence->finished() && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(started.sequence->finished());
  double ms = started.sequence->promptMs();
  engine.stop();
  io.poll();
  return ms;
}

TEST_F(SharedCpuTest, AStepRunsSlowerWhileOtherPodsAreBusy) {
  double alone = promptMsBeside(path_, 0);
  ASSERT_GT(alone, SharedCpu::kSliceMs);  // several slices
  EXPECT_NEAR(promptMsBeside(path_, 1) / alone, 1.25, 1e-9);
  EXPECT_NEAR(promptMsBeside(path_, 2) / alone, 3.0, 1e-9);
  EXPECT_NEAR(promptMsBeside(path_, 5) / alone, 6.0, 1e-9);  // 6 busy: twice the table's 3 pods
}

}  // namespace
}  // namespace prefixgate::sim

namespace prefixgate::sim {
namespace {

double processCpuMs() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

TEST(CpuBurner, SpendsTheCpuTimeAskedForThenCallsBack) {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  double burned_ms = -1;
  CpuBurner burner;
  burner.burn(30, [&] {
    std::lock_guard lock(mutex);
    burned_ms = CpuBurner::threadCpuMs();  // the compute thread's own clock
    done = true;
    cv.notify_one();
  });
  std::unique_lock lock(mutex);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return done; }));
  EXPECT_GE(burned_ms, 30.0);
}

TEST(CpuBurner, StoppingMidBurnEndsItWithoutTheCallback) {
  std::atomic<bool> called{false};
  auto started = std::chrono::steady_clock::now();
  {
    CpuBurner burner;
    burner.burn(60'000, [&] { called = true; });  // a minute of CPU
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(called);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(10));
}

// Ensures a --burn-cpu engine spends its steps computing (process CPU time at least the step's time) and reports
// the wall time they took, while a waiting engine uses next to no CPU for the same step.
TEST(Engine, BurnCpuSpendsTheStepsTimeComputing) {
  auto run = [](bool burn) {
    SimConfig config;
    config.time_scale = 1;
    config.step_overhead_ms = 40;
    config.burn_cpu = burn;
    asio::io_context io;
    Engine engine(config);
    asio::co_spawn(io, engine.run(), asio::detached);
    const double cpu_before = processCpuMs();
    auto started = engine.start(io.get_executor(), tokenize(std::string(160, 'p')), 1);  // 40 tokens
    EXPECT_TRUE(started.sequence);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.sequence && !started.sequence->finished() && std::chrono::steady_clock::now() < deadline)
      io.run_one_for(std::chrono::milliseconds(10));
    const double cpu_ms = processCpuMs() - cpu_before;
    const double prompt_ms = started.sequence ? started.sequence->promptMs() : 0;
    engine.stop();
    io.poll();
    return std::pair{cpu_ms, prompt_ms};
  };
  // The step costs at least its 40 ms overhead. Burning, that much CPU is spent (the wall time, reported, can be
  // longer on a busy machine); waiting, much less (the loop, the tokenizer, a busy machine's noise).
  auto [burn_cpu_ms, burn_prompt_ms] = run(true);
  EXPECT_GE(burn_prompt_ms, 40.0);
  EXPECT_GE(burn_cpu_ms, 0.95 * 40.0);
  auto [wait_cpu_ms, wait_prompt_ms] = run(false);
  EXPECT_GE(wait_prompt_ms, 40.0);
  EXPECT_LT(wait_cpu_ms, 0.95 * 40.0);
}

}  // namespace
}  // namespace prefixgate::sim
