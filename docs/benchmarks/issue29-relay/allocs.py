#!/usr/bin/python3
"""Allocations per proxied 2 KiB request, as docs/benchmarks.md ("Per-request path", "Allocations") counts them:
a one-thread gateway (prefix-cache, log_level warn, one pod) in front of the overhead benchmark's one-worker nginx
`return 200` upstream, tools/malloc_count in LD_PRELOAD; 2 s of wrk warm-up, then the counter read before and after
`wrk -t1 -c32 -d5s` with the fixed 2 KiB chat body. Each binary in BINARIES is measured in turn, `--rounds` times
interleaved (allocation counts are deterministic enough on a shared machine; requests/s are printed only for
completeness, not to compare).

Usage: PYTHONPATH=loadtest:loadtest/overhead docs/benchmarks/issue29-relay/allocs.py --rounds 2 NAME=BINARY...
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "loadtest"), str(ROOT / "loadtest" / "overhead")]
import harness  # noqa: E402
from bodies import chat_body  # noqa: E402
from overhead import Wrk  # noqa: E402
from servers import Daemon, find_tool, static_completion  # noqa: E402


def counter(path):
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            return int(Path(path).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.01)
    raise RuntimeError(f"no count in {path}")


def measure(name, binary, tmp, upstream_port, wrk, body, lib, seconds, heaptrack=None):
    harness.GATEWAY_BIN = binary
    mc = Path(tmp) / f"mc-{name}"
    pods = [{"name": "pod-0", "address": f"127.0.0.1:{upstream_port}", "models": ["sim-model"]}]
    env = {"LD_PRELOAD": lib, "MCOUNT_FILE": str(mc)} if not heaptrack else {}
    launcher = ["heaptrack", "-o", heaptrack] if heaptrack else ()
    gw = harness.Gateway(tmp, pods, name=f"gw-{name}", env=env, launcher=launcher, config={
        "routing": {"strategy": "prefix-cache"}, "threads": 1, "log_level": "warn",
        "health_check": {"interval_ms": 1000, "timeout_ms": 1000}})
    try:
        harness.wait_until(lambda: any(p["ready"] for p in gw.debug_pods()), what="pod ready")
        url = f"http://127.0.0.1:{gw.port}/v1/chat/completions"
        wrk.run(url, body, 32, 2)
        if heaptrack:
            result = wrk.run(url, body, 32, seconds)
            return 0, result["requests"], result.get("rps", 0)
        time.sleep(0.2)
        before = counter(mc)
        result = wrk.run(url, body, 32, seconds)
        time.sleep(0.2)
        after = counter(mc)
        requests = max(1, result["requests"])
        return (after - before) / requests, result["requests"], result.get("rps", 0)
    finally:
        gw.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--heaptrack", help="run each binary under heaptrack instead, writing PREFIX-NAME.zst")
    ap.add_argument("binaries", nargs="+", help="NAME=PATH")
    args = ap.parse_args()
    lib = "/tmp/malloc_count.so"
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", lib, str(ROOT / "tools/malloc_count/malloc_count.c"),
                    "-ldl", "-lpthread"], check=True)
    with tempfile.TemporaryDirectory(prefix="prefixgate-allocs-") as tmp:
        d = Path(tmp)
        for sub in ("upstream-body",):
            (d / sub).mkdir()
        port = harness.free_port()
        upstream = Daemon("nginx (static upstream)", [find_tool("nginx"), "-p", str(d), "-c", str(d / "upstream.conf"),
                                                      "-g", "daemon off;"], "nginx_upstream.conf", d / "upstream.conf",
                          {"dir": d, "listens": f"        listen 127.0.0.1:{port} backlog=4096;",
                           "body": static_completion()}, [port])
        try:
            wrk = Wrk(tmp, 1)
            body = wrk.bodies_file("fixed-2k", [chat_body(2048)])
            pairs = [b.split("=", 1) for b in args.binaries]
            for r in range(args.rounds):
                for name, binary in (pairs if r % 2 == 0 else list(reversed(pairs))):
                    trace = f"{args.heaptrack}-{name}" if args.heaptrack else None
                    per, requests, rps = measure(name, binary, tmp, port, wrk, body, lib, args.seconds, trace)
                    print(f"round {r + 1} {name}: {per:.2f} allocations per request ({requests} requests, "
                          f"wrk -c32 -d{args.seconds}s, {rps:.0f} req/s)", flush=True)
        finally:
            upstream.stop()


if __name__ == "__main__":
    main()
