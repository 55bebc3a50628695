#include "util/scheduler_slice.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

namespace prefixgate::util {
namespace {

// The kernel's struct sched_attr (include/uapi/linux/sched/types.h; glibc 2.36 has no wrapper for it).
struct SchedAttr {
  uint32_t size;
  uint32_t sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime;
  uint64_t sched_deadline;
  uint64_t sched_period;
  uint32_t sched_util_min;
  uint32_t sched_util_max;
};
static_assert(sizeof(SchedAttr) == 56, "SCHED_ATTR_SIZE_VER1");

}  // namespace

bool setThreadSchedulerSlice(std::chrono::microseconds slice, std::string& error) {
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  // The thread's nice value goes back in as it is: sched_setattr sets it too, and raising it back would need a
  // privilege (an operator's `nice -n 5` stays in force).
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (nice == -1 && errno != 0) {
    error = std::string("getpriority: ") + std::strerror(errno);
    return false;
  }
  SchedAttr attr{};
  attr.size = sizeof attr;
  attr.sched_policy = SCHED_OTHER;
  attr.sched_nice = nice;
  attr.sched_runtime = static_cast<uint64_t>(slice.count()) * 1000;
  if (syscall(SYS_sched_setattr, tid, &attr, 0u) != 0) {
    error = std::string("sched_setattr: ") + std::strerror(errno);
    return false;
  }
  return true;
}

int64_t threadSchedulerSliceNs() {
  std::ifstream in("/proc/thread-self/sched");
  std::string line;
  while (std::getline(in, line)) {
    const std::string_view view(line);
    if (!view.starts_with("se.slice")) continue;
    const size_t colon = view.find(':');
    if (colon == std::string_view::npos) return -1;
    try {
      return std::stoll(line.substr(colon + 1));
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

}  // namespace prefixgate::util
