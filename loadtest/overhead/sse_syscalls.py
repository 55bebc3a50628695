#!/usr/bin/python3
"""System calls per streamed SSE event, nginx against prefixgate prefix-cache, in one run: where the streaming
delay the overhead report measures goes. Starts the overhead benchmark's fleet (servers.Fleet: one-worker nginx,
one-loop prefixgate), streams through each proxy with sse_probe's client (2 connections x 4 streams x 500 events,
one every ms) while `perf stat` counts the proxy's system calls by tracepoint, alternating the two targets for
--rounds rounds, and prints one line per run. Needs perf (Debian: linux-perf) with tracepoints readable.

Usage: loadtest/overhead/sse_syscalls.py [--rounds N]   (the prefixgate binary as harness.py finds it)
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from servers import Fleet, child_pids  # noqa: E402
from sse_probe import probe  # noqa: E402

TARGETS = ("nginx", "prefixgate-prefix-cache")
CALLS = ("epoll_wait", "epoll_ctl", "recvmsg", "recvfrom", "sendmsg", "sendto", "writev", "timerfd_settime")


def stream_pids(fleet, target):
    """The processes that proxy `target`'s streams: nginx's master and workers, or the prefixgate instance whose
    pod is the SSE upstream (the fleet runs one per route)."""
    if target == "nginx":
        return [fleet.pids[target], *child_pids(fleet.pids[target])]
    return [p.proc.pid for p in fleet.started if getattr(p, "log_path", None) is not None
            and p.log_path.name == f"{target}-stream.log"]


def one_run(fleet, target, out_path):
    events = ",".join(["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{c}" for c in CALLS])
    pids = ",".join(map(str, stream_pids(fleet, target)))
    perf = subprocess.Popen(["perf", "stat", "-x,", "-e", events, "-o", str(out_path), "-p", pids])
    delays, _ = probe("127.0.0.1", fleet.ports[target]["stream"], 2, 4, 500)
    perf.send_signal(2)
    perf.wait(10)
    counts = {}
    for line in out_path.read_text().splitlines():
        fields = line.split(",")
        if len(fields) > 3 and fields[0].replace(".", "").isdigit():
            counts[fields[2].split(":")[1].removeprefix("sys_enter_")] = float(fields[0])
    delays.sort()
    return len(delays), delays[len(delays) // 2], counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="prefixgate-sse-syscalls-") as tmp:
        fleet = Fleet(tmp, stream_gap_ms=1)
        try:
            for r in range(args.rounds):
                for target in TARGETS if r % 2 == 0 else reversed(TARGETS):
                    n, p50, counts = one_run(fleet, target, Path(tmp) / "perf.txt")
                    per = {k: v / n for k, v in counts.items()}
                    print(f"round {r + 1} {target}: {n} events, delay p50 {p50:.0f} us, system calls per event "
                          f"{per.pop('sys_enter', 0):.2f}: "
                          + " ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.01),
                          flush=True)
        finally:
            fleet.stop()


if __name__ == "__main__":
    main()
