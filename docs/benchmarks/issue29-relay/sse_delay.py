#!/usr/bin/python3
"""SSE delay added per event by each prefixgate binary, against direct, in interleaved rounds: one
`sse_probe.py serve` upstream (one event per --gap-ms), one one-thread gateway per binary in front of it, and per
round the probe (2 connections x 4 streams of 500 events, as syscalls.py runs it) through direct and each gateway,
in an order that rotates by round. Prints per round and target the p50 / p99 delay and the p50 / p99 added over
direct in the same round, and the gateway's CPU microseconds per event (/proc). The machine was shared: compare
only within a round, and the medians over rounds.

Usage: docs/benchmarks/issue29-relay/sse_delay.py --rounds 5 NAME=BINARY...
"""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT / "loadtest"), str(ROOT / "loadtest" / "overhead")]
import harness  # noqa: E402
from servers import cpu_seconds  # noqa: E402
from sse_probe import probe  # noqa: E402


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("binaries", nargs="+", help="NAME=PATH")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="prefixgate-sse-") as tmp:
        upstream = harness.Process([sys.executable, str(ROOT / "loadtest/overhead/sse_probe.py"), "serve", "--port",
                                    "0", "--gap-ms", "1"], Path(tmp) / "sse-upstream.log")
        gateways = {}
        try:
            for name, binary in (b.split("=", 1) for b in args.binaries):
                harness.GATEWAY_BIN = binary
                pods = [{"name": "stream-pod", "address": f"127.0.0.1:{upstream.port}", "models": ["sim-model"]}]
                gateways[name] = harness.Gateway(tmp, pods, name=f"gw-{name}", config={
                    "routing": {"strategy": "prefix-cache"}, "threads": 1, "log_level": "warn",
                    "health_check": {"interval_ms": 1000, "timeout_ms": 1000}})
            targets = ["direct", *gateways]
            added = {name: ([], []) for name in gateways}
            for r in range(args.rounds):
                order = targets[r % len(targets):] + targets[:r % len(targets)]
                results = {}
                for target in order:
                    port = upstream.port if target == "direct" else gateways[target].port
                    pid = None if target == "direct" else gateways[target].proc.pid
                    cpu0 = cpu_seconds(pid) if pid else 0
                    delays, strays = probe("127.0.0.1", port, 2, 4, 500)
                    cpu = (cpu_seconds(pid) - cpu0) * 1e6 / max(1, len(delays)) if pid else 0
                    results[target] = (pct(delays, 0.5), pct(delays, 0.99), cpu, len(delays), strays)
                d50, d99 = results["direct"][:2]
                print(f"round {r + 1} direct: p50 {d50:.0f} us, p99 {d99:.0f} us ({results['direct'][3]} events)")
                for name in gateways:
                    p50, p99, cpu, events, strays = results[name]
                    added[name][0].append(p50 - d50)
                    added[name][1].append(p99 - d99)
                    print(f"round {r + 1} {name}: p50 {p50:.0f} us, p99 {p99:.0f} us; added p50 {p50 - d50:.0f} us, "
                          f"p99 {p99 - d99:.0f} us; gateway CPU {cpu:.1f} us per event ({events} events, "
                          f"{strays} stray last chunks)", flush=True)
            for name, (a50, a99) in added.items():
                print(f"median of {args.rounds} rounds {name}: added p50 {statistics.median(a50):.0f} us "
                      f"({min(a50):.0f} to {max(a50):.0f}), p99 {statistics.median(a99):.0f} us "
                      f"({min(a99):.0f} to {max(a99):.0f})")
        finally:
            for g in gateways.values():
                g.stop()
            upstream.stop()


if __name__ == "__main__":
    main()
