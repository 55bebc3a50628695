#!/usr/bin/python3
"""The experiment behind scheduler_slice_us (2026-12-07): the overhead fleet (servers.Fleet), then, on prefixgate's
stream gateway (run with scheduler_slice_us: 0 or a build without the key), every thread's EEVDF slice set from
outside with sched_setattr (sched_runtime, SCHED_OTHER) between measurements, each measurement being
sse_sched.measure() for prefixgate and then nginx. Its output on that day: slice-experiment.txt.

    PREFIXGATE_BIN=<build> /usr/bin/python3 docs/benchmarks/issue29-sse/slice_experiment.py
"""
import ctypes
import os
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "loadtest" / "overhead"))
sys.path.insert(0, str(ROOT / "loadtest"))
from servers import Fleet  # noqa: E402
import sse_sched  # noqa: E402

libc = ctypes.CDLL(None, use_errno=True)
SYS_SCHED_SETATTR = 314  # x86_64


def set_slice(tid, ns):
    attr = struct.pack("IIQiIQQQII", 56, 0, 0, 0, 0, ns, 0, 0, 0, 0)  # struct sched_attr, SCHED_OTHER
    if libc.syscall(SYS_SCHED_SETATTR, tid, ctypes.create_string_buffer(attr, 56), 0) != 0:
        print("sched_setattr failed", ctypes.get_errno())


with tempfile.TemporaryDirectory(prefix="slice-experiment-") as tmp:
    fleet = Fleet(tmp, stream_gap_ms=1)
    try:
        target = "prefixgate-prefix-cache"
        pid = sse_sched.target_pids(fleet, target)[0]
        for label, ns in (("default", None), ("slice2800us", 2_800_000), ("after2800-b", None),
                          ("slice100us", 100_000), ("after100-b", None), ("slice1400us", 1_400_000),
                          ("after1400-b", None)):
            if ns is not None:
                for tid in os.listdir(f"/proc/{pid}/task"):
                    set_slice(int(tid), ns)
            m = sse_sched.measure(fleet, target, tmp)
            n = sse_sched.measure(fleet, "nginx", tmp)
            t, u = m["threads"][0], n["threads"][0]
            print(label, f"pg sch p50 {t['sch_delay_us']['p50']:.0f} on-waker {t['sch_delay_on_waker_cpu_p50_us']:.0f} "
                  f"probe p50 {m['probe_p50_us']:.0f} p99 {m['probe_p99_us']:.0f} | nginx sch p50 "
                  f"{u['sch_delay_us']['p50']:.0f} probe p50 {n['probe_p50_us']:.0f} p99 {n['probe_p99_us']:.0f}",
                  flush=True)
    finally:
        fleet.stop()
