#!/usr/bin/python3
"""What flow control costs a request while nothing queues (issue 27: "flow control adds nothing to an idle path").

Two prefixgate gateways, both `prefix-cache` with one event loop (`threads: 1`, `log_level: warn`), in front of the
same fast static upstream (one nginx worker answering every POST at once on 8 ports: the 8 pods, as in the
proxy-overhead benchmark, servers.py): `flow-off` (today's default) and `flow-on` (`flow_control.enabled: true`,
`max_in_flight_per_pod` far above the load, so every request takes the straight-through path: resolve its flow,
take the gate's lock, find a pod with room). Load: wrk, one thread, keep-alive connections, two bodies: one fixed
2 KiB chat body, and 64 rotating conversation families of 8 x 2 KiB bodies (prefix-cache matching for real).
Rounds interleave the two gateways (round r starts with gateway r mod 2); each cell is the median of the rounds
with its min-max; the on/off ratio is taken per round (the two runs of a round are back to back) and its median
reported. A run is checked to have queued nothing (prefixgate_flow_dispatched_total stays 0).

Writes flow-idle.json (every run) and flow-idle.md into --out.
"""
import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
import provenance  # noqa: E402
from bodies import chat_body, family_bodies  # noqa: E402
from harness import Gateway, free_port, wait_until  # noqa: E402
from overhead import Wrk  # noqa: E402
from servers import MODEL, PODS, missing_tools, static_upstream  # noqa: E402

TARGETS = ("flow-off", "flow-on")
FIGURES = ("rps", "p50_us", "p99_us", "cpu_us_per_request")
MIN_ROUNDS = 5


def start(work_dir):
    """The static upstream and the two gateways; returns (daemons to stop, {target: Gateway})."""
    d = Path(work_dir)
    ports = [free_port() for _ in range(PODS)]
    upstream = static_upstream(d, ports)
    started, gateways = [upstream], {}
    pods = [{"name": f"pod-{i}", "address": f"127.0.0.1:{port}", "models": [MODEL]} for i, port in enumerate(ports)]
    for target in TARGETS:
        config = {"routing": {"strategy": "prefix-cache"}, "threads": 1, "log_level": "warn",
                  "health_check": {"interval_ms": 1000, "timeout_ms": 1000}}
        if target == "flow-on":
            config["flow_control"] = {"enabled": True, "max_in_flight_per_pod": 100000}
        gateway = Gateway(d, pods, name=target, config=config)
        started.append(gateway)
        wait_until(lambda: len([p for p in gateway.debug_pods() if p["ready"]]) == len(pods),
                   what=f"{target}: every pod ready")
        gateways[target] = gateway
    return started, gateways


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def phase(wrk, gateways, args, label, body_file):
    """Interleaved rounds of both gateways on one body file: per target its runs, and the per-round on/off ratios."""
    url = {t: f"http://127.0.0.1:{g.port}/v1/chat/completions" for t, g in gateways.items()}
    if not args.tiny:
        for target in TARGETS:
            wrk.run(url[target], body_file, args.connections, 1)
    runs = {t: [] for t in TARGETS}
    for r in range(args.rounds):
        order = TARGETS if r % 2 == 0 else TARGETS[::-1]
        for target in order:
            result = wrk.run(url[target], body_file, args.connections, args.duration_s,
                             cpu_pid=gateways[target].proc.pid)
            result["round"] = r
            runs[target].append(result)
            print(f"[{label} round {r + 1}/{args.rounds}] {target}: {result['rps']:.0f} req/s, p99 "
                  f"{result['p99_us'] / 1000:.2f} ms, CPU {result['cpu_us_per_request']:.1f} us/req", flush=True)
    cells = {t: {k: spread([run[k] for run in rs]) for k in FIGURES} for t, rs in runs.items()}
    for t, rs in runs.items():
        cells[t]["errors"] = sum(run.get("socket_errors", 0) + run.get("non2xx", 0) for run in rs)
    ratios = {k: spread([on[k] / off[k] for on, off in zip(runs["flow-on"], runs["flow-off"])]) for k in FIGURES}
    return {"label": label, "runs": runs, "cells": cells, "on_over_off": ratios}


def markdown(results):
    lines = ["# Flow control on an idle path: what a request pays while nothing queues", ""]
    lines += provenance.markdown(results["provenance"])
    lines += [__doc__.split("\n\n")[1].replace("\n", " "), "",
              f"{results['config']['rounds']} rounds of {results['config']['duration_s']} s per gateway and body, "
              f"{results['config']['connections']} connections. Requests queued by flow-on over the whole run: "
              f"{results['flow_dispatched']} (must be 0: every request went straight through).", ""]
    for p in results["phases"]:
        lines += [f"## {p['label']}", "", "| gateway | requests/s | p50 ms | p99 ms | CPU us/request | errors |",
                  "| --- | --- | --- | --- | --- | --- |"]

        def cell(c, k, scale=1.0, digits=1):
            return (f"{c[k]['median'] / scale:.{digits}f} [{c[k]['min'] / scale:.{digits}f}-"
                    f"{c[k]['max'] / scale:.{digits}f}]")
        for t in TARGETS:
            c = p["cells"][t]
            lines.append(f"| {t} | {cell(c, 'rps', digits=0)} | {cell(c, 'p50_us', 1000, 3)} | "
                         f"{cell(c, 'p99_us', 1000, 3)} | {cell(c, 'cpu_us_per_request')} | {c['errors']} |")
        r = p["on_over_off"]
        lines.append(f"| on / off (per round) | {cell(r, 'rps', digits=3)} | {cell(r, 'p50_us', digits=3)} | "
                     f"{cell(r, 'p99_us', digits=3)} | {cell(r, 'cpu_us_per_request', digits=3)} | |")
        lines.append("")
    lines += ["wrk commands:", ""] + [f"    {c}" for c in results["wrk_commands"]] + [""]
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="docs/benchmarks", help="folder for flow-idle.json and flow-idle.md")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--duration-s", type=int, default=4, help="seconds per wrk run")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1, help="seed of the family bodies and their order")
    ap.add_argument("--tiny", action="store_true", help="one round of 1-second runs, no warm-up: the smoke test")
    args = ap.parse_args(argv)
    if args.tiny:
        args.rounds, args.duration_s = 1, 1
    elif args.rounds < MIN_ROUNDS:
        ap.error(f"--rounds {args.rounds}: at least {MIN_ROUNDS}")
    missing = [t for t in missing_tools() if t in ("nginx", "wrk")]
    if missing:
        print(f"needs {', '.join(missing)} (apt-get install {' '.join(missing)})", file=sys.stderr)
        return 3
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "loadtest/overhead/flow_idle.py " + " ".join(argv if argv is not None else sys.argv[1:])
    git_at_start = provenance.git_info()
    started_at = time.monotonic()
    results = {"config": {k: v for k, v in vars(args).items()}, "phases": []}
    with provenance.LoadSampler() as load, tempfile.TemporaryDirectory(prefix="prefixgate-flow-idle-") as tmp:
        started, gateways = start(tmp)
        try:
            wrk = Wrk(tmp, 1)
            fixed = wrk.bodies_file("fixed-2k", [chat_body(2048)])
            results["phases"].append(phase(wrk, gateways, args, "one fixed 2 KiB body", fixed))
            families = wrk.bodies_file("families", family_bodies(64, 8, 2048, args.seed))
            results["phases"].append(phase(wrk, gateways, args, f"64 families x 8 bodies of 2 KiB, seed {args.seed}",
                                           families))
            results["flow_dispatched"] = gateways["flow-on"].metric("prefixgate_flow_dispatched_total")
            results["wrk_commands"] = wrk.commands
        finally:
            for process in reversed(started):
                process.stop()
    results["wall_s"] = time.monotonic() - started_at
    results["provenance"] = provenance.collect(command, {"prefixgate": provenance.gateway_binary()}, load,
                                               git=git_at_start)
    (out / "flow-idle.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "flow-idle.md").write_text(markdown(results))
    print(f"report: {out / 'flow-idle.md'} ({results['wall_s']:.0f} s)")
    return 0 if results["flow_dispatched"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
