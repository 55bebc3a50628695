// util::setThreadSchedulerSlice: the calling thread's EEVDF slice is what the kernel then shows in
// /proc/thread-self/sched (se.slice), 0 gives the kernel's default back, and the thread's nice value is kept.
#include "util/scheduler_slice.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

namespace prefixgate::util {
namespace {

using std::chrono::microseconds;

// Whether this kernel honours a SCHED_OTHER thread's custom slice: EEVDF's custom slices came with Linux 6.12 (6.6
// to 6.11 show se.slice but ignore sched_runtime, so the slice asked for could not be seen there).
bool kernelHonoursCustomSlices() {
  utsname u{};
  int major = 0, minor = 0;
  if (uname(&u) != 0 || std::sscanf(u.release, "%d.%d", &major, &minor) != 2) return false;
  return (major > 6 || (major == 6 && minor >= 12)) && threadSchedulerSliceNs() >= 0;
}

// Runs `body` on a fresh thread (the test's own thread keeps its slice and nice value).
template <class Body>
void onNewThread(Body body) {
  std::thread(body).join();
}

TEST(SchedulerSliceTest, TheKernelShowsTheSliceAskedFor) {
  if (!kernelHonoursCustomSlices()) GTEST_SKIP() << "this kernel has no EEVDF custom slices (Linux 6.12+)";
  onNewThread([] {
    const int64_t before = threadSchedulerSliceNs();
    std::string error;
    ASSERT_TRUE(setThreadSchedulerSlice(microseconds(100), error)) << error;
    EXPECT_EQ(threadSchedulerSliceNs(), 100'000);
    EXPECT_NE(before, 100'000);  // else the check above could not fail
    ASSERT_TRUE(setThreadSchedulerSlice(microseconds(3000), error)) << error;
    EXPECT_EQ(threadSchedulerSliceNs(), 3'000'000);
    ASSERT_TRUE(setThreadSchedulerSlice(microseconds(0), error)) << error;
    EXPECT_EQ(threadSchedulerSliceNs(), before);  // 0: the kernel's default again
  });
}

// Ensures the call keeps a lowered priority (an operator's `nice`): sched_setattr sets the nice value too, and
// passing 0 would raise it back (or fail without the privilege to).
TEST(SchedulerSliceTest, KeepsTheThreadsNiceValue) {
  onNewThread([] {
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    ASSERT_EQ(setpriority(PRIO_PROCESS, tid, 5), 0);
    std::string error;
    ASSERT_TRUE(setThreadSchedulerSlice(microseconds(100), error)) << error;
    EXPECT_EQ(getpriority(PRIO_PROCESS, tid), 5);
  });
}

}  // namespace
}  // namespace prefixgate::util
