#pragma once
// The calling thread's CPU time slice under Linux's EEVDF scheduler (6.12 and later: sched_setattr's sched_runtime
// for a SCHED_OTHER thread, a "custom slice"). The gateway's event-loop threads ask for a short one
// (scheduler_slice_us, 100 us by default): a thread woken by the bytes of an engine's stream is placed on the
// waker's CPU, and with the default slice it waited there a median 37-44 us for the waker to sleep, against 14-25
// us for nginx's worker on the same machine; with a 100 us slice, about 10 us (docs/benchmarks.md, "A short
// scheduler slice for the event loops"). The thread's share of the CPU is unchanged (its weight, from its nice
// value, is kept); only how long it may run before the scheduler reconsiders, and how soon it preempts when woken.
// Kernels before 6.12 have no custom slices: whether the slice took is read back from /proc (se.slice), and the
// gateway says once when it did not.
#include <chrono>
#include <cstdint>
#include <string>

namespace prefixgate::util {

// Sets the calling thread's slice (0 = the kernel's default). False with `error` saying why (the system call's
// error, e.g. EPERM in a sandbox that forbids it); the thread then keeps its slice.
bool setThreadSchedulerSlice(std::chrono::microseconds slice, std::string& error);

// The calling thread's current slice in nanoseconds as /proc shows it (se.slice), or -1 when the kernel does not
// show one (before EEVDF) or /proc cannot be read.
int64_t threadSchedulerSliceNs();

}  // namespace prefixgate::util
