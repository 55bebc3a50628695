#!/usr/bin/python3
"""System calls per proxied request and per streamed SSE event, nginx against prefixgate prefix-cache, counted the
same way for both (`perf stat` on the system-call tracepoints, which unlike strace does not slow the calls it
counts); and how much of each proxy's CPU time goes to waking the receiving peer. Starts the overhead benchmark's
fleet (servers.Fleet: one-worker nginx, one-loop prefixgate) and alternates the two targets for --rounds rounds:
- requests: wrk -c32 for 4 s with the fixed 2 KiB chat body (wrk_post.lua), calls per answered request;
- events: sse_probe's client, 2 connections x 4 streams x 500 events one ms apart, calls per event;
- wake-ups (once per target): `perf record -g` for 4 s under the requests load, then the share of samples whose
  call chain holds `sock_def_readable`, the kernel's "data arrived, wake the reader" (perf report --children).
Needs perf (Debian: linux-perf) with tracepoints readable. The prefixgate binary is found as harness.py finds it.

With --every-call every system-call tracepoint is counted (syscalls:sys_enter_*) and calls down to 0.002 per unit
are listed: what a proxy does besides the requests' own reads and writes (prefixgate's scrapes of the pods' /metrics,
health checks and pods-file polls run on a clock, so their share per unit depends on the load's rate). Counting every
tracepoint slows each call a little: compare targets within one such run.

Usage: loadtest/overhead/syscalls.py [--rounds N] [--every-call | --calls connect,socket,...]
"""
import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from bodies import chat_body  # noqa: E402
from overhead import Wrk  # noqa: E402
from servers import Fleet, child_pids  # noqa: E402
from sse_probe import probe  # noqa: E402

TARGETS = ("nginx", "prefixgate-prefix-cache")
CALLS = ("epoll_wait", "epoll_ctl", "recvmsg", "recvfrom", "sendmsg", "sendto", "writev", "timerfd_settime")


def proxy_pids(fleet, target, route):
    """The processes proxying `target`'s `route`: nginx's master and workers, or the prefixgate instance of that
    route (the fleet runs one per route)."""
    if target == "nginx":
        return [fleet.pids[target], *child_pids(fleet.pids[target])]
    return [p.proc.pid for p in fleet.started if getattr(p, "log_path", None) is not None
            and p.log_path.name == f"{target}-{route}.log"]


def counted(pids, out_path, load, every_call=False, calls=CALLS):
    """Runs `load()` (returning the number of requests or events) under perf stat; {call: count per unit}."""
    if every_call:
        events = "raw_syscalls:sys_enter,syscalls:sys_enter_*"
    else:
        events = ",".join(["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{c}" for c in calls])
    perf = subprocess.Popen(["perf", "stat", "-x,", "-e", events, "-o", str(out_path), "-p", ",".join(map(str, pids))])
    # Attaching every tracepoint can take seconds (13 s seen on a busy 2-core machine): the load starts after.
    time.sleep(15 if every_call else 0.3)
    units = max(1, load())
    perf.send_signal(2)
    perf.wait(60)
    per = {}
    for line in out_path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 3 and fields[0].replace(".", "").isdigit():
            per[fields[2].split(":")[1].removeprefix("sys_enter_")] = float(fields[0]) / units
    return per


def describe(per, every_call=False):
    total = per.pop("sys_enter", 0)
    if every_call:
        listed = " ".join(f"{k} {v:.3f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.002)
        return f"{total:.3f}: {listed}"
    return f"{total:.2f}: " + " ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1])
                                       if v >= 0.01)


def wake_share(pids, wrk, url, body, out_dir):
    """Percent of perf samples (inclusive) under sock_def_readable while wrk loads the proxy."""
    data = Path(out_dir) / "perf.data"
    load = threading.Thread(target=wrk.run, args=(url, body, 32, 6))
    load.start()
    time.sleep(1)
    subprocess.run(["perf", "record", "-F", "999", "-g", "-o", str(data), "-p", ",".join(map(str, pids)), "--",
                    "sleep", "4"], capture_output=True)
    load.join()
    report = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--children", "--sort", "sym",
                             "-g", "none"], capture_output=True, text=True).stdout
    for line in report.splitlines():
        if line.strip().endswith(" sock_def_readable"):
            return line.split()[0]
    return "0%"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--every-call", action="store_true", help="count every system call, not only the usual ones")
    ap.add_argument("--calls", default="", help="more system calls to count beside the usual ones, comma-separated "
                    "(listed down to 0.002 per unit, as --every-call does, at the usual ones' attach cost)")
    args = ap.parse_args()
    calls = CALLS + tuple(c for c in args.calls.split(",") if c)
    listed = args.every_call or bool(args.calls)
    with tempfile.TemporaryDirectory(prefix="prefixgate-syscalls-") as tmp:
        fleet = Fleet(tmp, stream_gap_ms=1)
        try:
            wrk = Wrk(tmp, 1)
            body = wrk.bodies_file("fixed-2k", [chat_body(2048)])
            out = Path(tmp) / "perf.txt"
            for r in range(args.rounds):
                for target in TARGETS if r % 2 == 0 else reversed(TARGETS):
                    per = counted(proxy_pids(fleet, target, "static"), out,
                                  lambda: wrk.run(fleet.url(target, "static"), body, 32, 4)["requests"],
                                  args.every_call, calls)
                    print(f"round {r + 1} {target}: system calls per 2 KiB request (wrk -c32) "
                          f"{describe(per, listed)}", flush=True)
                    per = counted(proxy_pids(fleet, target, "stream"), out,
                                  lambda: len(probe("127.0.0.1", fleet.ports[target]["stream"], 2, 4, 500)[0]),
                                  args.every_call, calls)
                    print(f"round {r + 1} {target}: system calls per SSE event {describe(per, listed)}",
                          flush=True)
            for target in TARGETS:
                share = wake_share(proxy_pids(fleet, target, "static"), wrk, fleet.url(target, "static"), body, tmp)
                print(f"{target}: samples under sock_def_readable (waking the reader), wrk -c32: {share}", flush=True)
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
