#!/usr/bin/python3
"""Where a streamed SSE event's time goes in the proxy hop, nginx against prefixgate prefix-cache, from the kernel's
scheduler: `perf sched record` (system-wide scheduler tracepoints) while sse_probe's client streams through one
target (2 connections x 4 responses x 500 events one ms apart, as syscalls.py), then `perf sched timehist`, which
gives for every time a thread ran: its scheduling delay (woken -> running on a CPU) and its run time (on the CPU
until it slept again: its reads, its user-space work and its writes, including the loopback TCP receive path its
writes run in the kernel and the wake-up of the reader). For the proxy's threads that ran during the stream:
wake-ups per event, the median / p90 / p99 scheduling delay and run time per wake-up, and where the woken thread
ran: on the CPU of the thread that woke it (the scheduler's wake-affine placement: it then waits until that thread
sleeps or is preempted) or on another; and the probe's own
per-event delay (p50 / p99), measured in the same window, against direct (the client on the upstream itself, also
recorded). Starts the overhead benchmark's fleet (servers.Fleet: one-worker nginx, one-loop prefixgate) and
alternates the targets for --rounds rounds.

The proxy's per-event cost in instructions is `callgrind_request.py --stream`; its system calls, `syscalls.py`.
A per-event added delay that neither the run time nor the scheduling delay accounts for lies outside the proxy
(the upstream's and the client's own wake-ups, which the two shares of the 2-core machine's CPUs decide).

Needs perf (Debian: linux-perf) with the sched tracepoints readable (root, or perf_event_paranoid <= -1).

Usage: loadtest/overhead/sse_sched.py [--rounds N] [--json FILE]
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from servers import Fleet, child_pids  # noqa: E402
from sse_probe import probe  # noqa: E402

TARGETS = ("direct", "nginx", "prefixgate-prefix-cache")
CONNECTIONS, STREAMS, EVENTS = 2, 4, 500

# timehist's lines: time, [cpu], task name[tid/pid] (or [tid] for a process's main thread), wait, sch delay, run
# (milliseconds); with -w, also wake-ups: time, [the waker's cpu], the waker, "awakened: " the woken task.
LINE = re.compile(r"^\s*[\d.]+\s+\[(\d+)\]\s+(.+?)\[(\d+)(?:/(\d+))?\]\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
WAKEUP = re.compile(r"^\s*[\d.]+\s+\[(\d+)\]\s+.+?\s+awakened: (.+?)\[(\d+)(?:/(\d+))?\]\s*$")


def quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def runs_of(timehist_text, pids):
    """{tid: [(sch_delay_us, run_us, placed), ...]} for the threads of `pids` in `perf sched timehist -w`'s output;
    placed: "waker" when the run is on the CPU its wake-up was made from, "other" on another CPU, None when the
    wake-up is not in the text."""
    runs, woken_from = {}, {}
    for line in timehist_text.splitlines():
        w = WAKEUP.match(line)
        if w:
            woken_from[int(w.group(3))] = int(w.group(1))
            continue
        m = LINE.match(line)
        if not m:
            continue
        tid, pid = int(m.group(3)), int(m.group(4) or m.group(3))
        if pid in pids or tid in pids:
            cpu = woken_from.pop(tid, None)
            placed = None if cpu is None else "waker" if cpu == int(m.group(1)) else "other"
            runs.setdefault(tid, []).append((float(m.group(6)) * 1000, float(m.group(7)) * 1000, placed))
    return runs


def summarize(runs, events):
    """The proxy's threads that ran, busiest first: wake-ups per event and the delay / run time quantiles (us)."""
    threads = []
    for tid, samples in sorted(runs.items(), key=lambda kv: -len(kv[1])):
        delays = [d for d, _, _ in samples]
        run = [r for _, r, _ in samples]
        on_waker = [d for d, _, placed in samples if placed == "waker"]
        placed = [p for _, _, p in samples if p is not None]
        threads.append({"tid": tid, "wakeups": len(samples), "wakeups_per_event": len(samples) / max(events, 1),
                        "on_waker_cpu_share": len(on_waker) / len(placed) if placed else float("nan"),
                        "sch_delay_on_waker_cpu_p50_us": quantile(on_waker, .5),
                        "sch_delay_us": {q: quantile(delays, v) for q, v in (("p50", .5), ("p90", .9), ("p99", .99))},
                        "run_us": {q: quantile(run, v) for q, v in (("p50", .5), ("p90", .9), ("p99", .99))},
                        "run_us_per_event": sum(run) / max(events, 1)})
    return threads


def target_pids(fleet, target):
    """The processes whose threads carry the target's stream: the upstream (direct), nginx's master and worker, or
    the prefixgate instance of the stream route."""
    if target == "direct":
        return [p.proc.pid for p in fleet.started if getattr(p, "name", "") == "sse_probe.py serve"]
    if target == "nginx":
        return [fleet.pids[target], *child_pids(fleet.pids[target])]
    return [p.proc.pid for p in fleet.started if getattr(p, "log_path", None) is not None
            and p.log_path.name == f"{target}-stream.log"]


def measure(fleet, target, work_dir):
    data = Path(work_dir) / "sched.data"
    perf = subprocess.Popen(["perf", "sched", "record", "-a", "-o", str(data)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attaching the tracepoints
    delays, _ = probe("127.0.0.1", fleet.ports[target]["stream"], CONNECTIONS, STREAMS, EVENTS)
    perf.send_signal(2)
    perf.wait(60)
    text = subprocess.run(["perf", "sched", "timehist", "-w", "-i", str(data)], capture_output=True, text=True).stdout
    pids = set(target_pids(fleet, target))
    events = len(delays)
    return {"events": events, "probe_p50_us": quantile(delays, .5), "probe_p99_us": quantile(delays, .99),
            "threads": summarize(runs_of(text, pids), events)}


def describe(target, m, direct):
    added = "" if direct is None else (f", added over direct p50 {m['probe_p50_us'] - direct['probe_p50_us']:.0f} "
                                       f"p99 {m['probe_p99_us'] - direct['probe_p99_us']:.0f}")
    lines = [f"{target}: {m['events']} events, probe delay p50 {m['probe_p50_us']:.0f} p99 "
             f"{m['probe_p99_us']:.0f} us{added}"]
    for t in m["threads"][:3]:
        lines.append(f"  thread {t['tid']}: {t['wakeups_per_event']:.2f} wake-ups per event; scheduling delay "
                     f"p50/p90/p99 {t['sch_delay_us']['p50']:.1f}/{t['sch_delay_us']['p90']:.1f}/"
                     f"{t['sch_delay_us']['p99']:.1f} us; run time per wake-up p50/p90/p99 {t['run_us']['p50']:.1f}/"
                     f"{t['run_us']['p90']:.1f}/{t['run_us']['p99']:.1f} us; run time per event "
                     f"{t['run_us_per_event']:.1f} us; on the waker's CPU {100 * t['on_waker_cpu_share']:.0f} % "
                     f"of wake-ups (scheduling delay there p50 {t['sch_delay_on_waker_cpu_p50_us']:.1f} us)")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write every round's figures here")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="prefixgate-sse-sched-") as tmp:
        fleet = Fleet(tmp, stream_gap_ms=1)
        try:
            for r in range(args.rounds):
                order = TARGETS if r % 2 == 0 else (TARGETS[0], *reversed(TARGETS[1:]))
                direct = None
                for target in order:
                    m = measure(fleet, target, tmp)
                    results.append({"round": r + 1, "target": target, **m})
                    if target == "direct":
                        direct = m
                    print(f"round {r + 1} {describe(target, m, direct if target != 'direct' else None)}",
                          flush=True)
        finally:
            fleet.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    for target in TARGETS[1:]:
        rows = [x for x in results if x["target"] == target and x["threads"]]
        if rows:
            busiest = [x["threads"][0] for x in rows]
            print(f"{target}, medians over {len(rows)} rounds: scheduling delay p50 "
                  f"{statistics.median(t['sch_delay_us']['p50'] for t in busiest):.1f} us, run time per event "
                  f"{statistics.median(t['run_us_per_event'] for t in busiest):.1f} us")


if __name__ == "__main__":
    main()
