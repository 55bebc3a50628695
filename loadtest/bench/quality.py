#!/usr/bin/python3
"""Routing-quality benchmark: for each workload, for each strategy, start fresh simulated engine pods (cold caches)
and a prefixgate in front of them, stream the workload through the gateway, and report throughput, TTFT, ITL,
the engines' token hit ratio against the upper bound, and the load per pod.

All latencies are simulated seconds: the pods run with --time-scale S (delays x S) and every measured duration
is divided by S. Workload parameters are set with --param WORKLOAD.NAME=VALUE (see --list-params).

Examples:
  loadtest/bench/quality.py --workloads capacity-pressure --strategies random,prefix-cache
  loadtest/bench/quality.py --tiny --pods 2 --strategies random,prefix-cache --out /tmp/report
  scripts/bench_quality.sh        (the full committed report)
"""
import argparse
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from bench import report, workloads  # noqa: E402
from bench.loadgen import run_workload  # noqa: E402
from bench.stats import summarize  # noqa: E402
from bench.trace import TraceParams, trace_workload  # noqa: E402
from harness import GATEWAY_BIN, Gateway, Sim, request, wait_until  # noqa: E402

# Strategy name -> the gateway's `routing` config. Strategies the gateway offers beyond these are added as they are.
STRATEGIES = {
    "random": {"strategy": "random"},
    "least-request": {"strategy": "least-request"},
    "prefix-cache": {"strategy": "prefix-cache"},
    "prefix-cache-standalone": {"strategy": "prefix-cache", "blend": {"load_balance_weight": 0}},
}
PARAMS = {**workloads.PARAMS, "trace": TraceParams}
BUILDERS = {**workloads.BUILDERS, "trace": trace_workload}
# --tiny: seconds, for the smoke test and development.
TINY = {
    "shared-prefix": {"groups": "4", "prompts_per_group": "4", "rate": "20"},
    "multi-turn": {"users": "4", "turns": "3", "user_rate": "8", "think_s": "0.2"},
    "capacity-pressure": {"groups": "8", "output_tokens": "200", "rates": "4,8", "stage_s": "1"},
    "trace": {"limit": "24", "speedup": "4"},
}


def gateway_strategies(tmp):
    """The strategy names the gateway binary accepts: an unknown name makes `--check` list the valid ones."""
    Path(tmp, "probe-pods.yaml").write_text("pods: []\n")
    conf = Path(tmp, "probe.yaml")
    conf.write_text("discovery: {file: probe-pods.yaml}\nrouting: {strategy: no-such-strategy}\n")
    out = subprocess.run([GATEWAY_BIN, "--config", str(conf), "--check"], capture_output=True, text=True, timeout=30)
    found = re.search(r"\(valid: ([^)]*)\)", out.stdout + out.stderr)
    return [name.strip() for name in found.group(1).split(",")] if found else []


def resolve_strategies(text, offered):
    """The strategies to run: `all` = the four named ones plus any other the gateway offers."""
    specs = dict(STRATEGIES)
    for name in offered:
        specs.setdefault(name, {"strategy": name})
    names = list(specs) if text == "all" else [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in specs]
    if unknown:
        raise SystemExit(f"unknown strategies {unknown}; known: {', '.join(specs)}")
    return [(name, specs[name]) for name in names]


def build_workload(name, overrides, pods, seed):
    params = workloads.apply_overrides(PARAMS[name](), overrides)
    return BUILDERS[name](params, pods, seed)


def dead_processes(processes):
    """'name: exit status, last log line' for every process that is no longer running."""
    dead = []
    for proc in processes:
        if proc.proc.poll() is not None:
            tail = proc.read_log().strip().splitlines()[-1:] or ["(empty log)"]
            dead.append(f"{proc.log_path.stem} exited with {proc.proc.returncode}: {tail[0][:200]}")
    return dead


def scrape_engine_hits(sims):
    """The engines' own prefix-cache hit ratio (vllm:prefix_cache_hits / queries), a cross-check of `usage`;
    None when a pod does not answer."""
    hits = queries = 0.0
    for sim in sims:
        try:
            status, _, body = request("127.0.0.1", sim.port, "GET", "/metrics", timeout=5)
        except OSError:
            return None
        for line in body.decode().splitlines() if status == 200 else []:
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.rsplit(" ", 1)[1])
    return hits / queries if queries else None


def run_strategy(workload, name, routing, args, tmp):
    """Fresh pods and gateway, one workload through them; returns (records, wall seconds, engine hit ratio)."""
    sims = []
    gateway = None
    try:
        for i in range(args.pods):
            sims.append(Sim(tmp, f"{workload.name}-{name}-engine-{i}", "--kv-capacity-tokens",
                            str(workload.kv_capacity_tokens), "--log-level", "warn", *workload.sim_args,
                            time_scale=f"{args.time_scale:g}"))
        gateway = Gateway(tmp, sims, config={"routing": routing, "log_level": "warn", "threads": args.gateway_threads},
                          name=f"gateway-{workload.name}-{name}")
        wait_until(lambda: all(p["ready"] for p in gateway.debug_pods()), timeout=10, what="every pod ready")
        records, wall, notes = run_workload("127.0.0.1", gateway.port, workload, args.time_scale, args.deadline_s,
                                            progress=args.progress, label=f"{workload.name:>17} {name:<23}")
        notes["crashed"] = dead_processes([gateway, *sims])
        return records, wall, scrape_engine_hits(sims), notes
    finally:
        if gateway is not None:
            gateway.stop()
        for sim in sims:
            sim.stop()


def parse_params(items):
    """--param WORKLOAD.NAME=VALUE items -> {workload: {name: value}}."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        workload, dot, name = key.partition(".")
        if not sep or not dot or workload not in PARAMS:
            raise SystemExit(f"--param {item!r}: expected WORKLOAD.NAME=VALUE with WORKLOAD in {', '.join(PARAMS)}")
        out.setdefault(workload, {})[name] = value
    return out


def list_params():
    for name, cls in PARAMS.items():
        print(f"{name}:")
        for f in fields(cls):
            print(f"  {name}.{f.name} = {f.default!r}")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="shared-prefix,multi-turn,capacity-pressure,trace",
                    help="comma-separated, in order (default: all four)")
    ap.add_argument("--strategies", default="all", help="comma-separated, or all (default)")
    ap.add_argument("--pods", type=int, default=8, help="simulated engine pods (default 8)")
    ap.add_argument("--time-scale", type=float, default=0.5,
                    help="simulator speed: delays x this; latencies are reported / this (default 0.5)")
    ap.add_argument("--kv-capacity-tokens", type=int, default=0, metavar="TOKENS",
                    help="KV cache per pod for every workload, in the workload's (scaled) tokens; default: each "
                         "workload's own (capacity-pressure derives it from working_set_fraction)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--param", action="append", default=[], metavar="WORKLOAD.NAME=VALUE")
    ap.add_argument("--closed-loop", type=int, default=0, metavar="USERS",
                    help="run every workload closed loop with USERS concurrent users (each sends its next session "
                         "when the last one ends; arrival times are ignored) instead of open loop")
    ap.add_argument("--tiny", action="store_true", help="tiny workloads (seconds): the smoke test")
    ap.add_argument("--gateway-threads", type=int, default=2)
    ap.add_argument("--deadline-s", type=float, default=600.0, help="wall-clock limit of one strategy's run")
    ap.add_argument("--out", default="bench-report", help="folder for REPORT.md, summary.json and the PNGs")
    ap.add_argument("--work-dir", default=None,
                    help="keep the pods' and gateways' configs and logs here (default: a temporary folder, removed)")
    ap.add_argument("--command", default=None, help="the command line to quote in the report (default: this one)")
    ap.add_argument("--progress", choices=["auto", "always", "never"], default="auto",
                    help="progress bar on stderr (auto: when stderr is a terminal)")
    ap.add_argument("--list-params", action="store_true", help="print every workload parameter and exit")
    args = ap.parse_args(argv)
    args.progress = {"auto": None, "always": True, "never": False}[args.progress]
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.list_params:
        list_params()
        return 0
    overrides = parse_params(args.param)
    names = [n.strip() for n in args.workloads.split(",") if n.strip()]
    for name in names:
        if name not in BUILDERS:
            raise SystemExit(f"unknown workload {name!r}; known: {', '.join(BUILDERS)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    started = time.monotonic()
    sections, summary = [], {"time_scale": args.time_scale, "pods": args.pods, "seed": args.seed, "workloads": {}}
    with tempfile.TemporaryDirectory(prefix="prefixgate-bench-") as tmp:
        if args.work_dir:
            tmp = args.work_dir
            Path(tmp).mkdir(parents=True, exist_ok=True)
        strategies = resolve_strategies(args.strategies, gateway_strategies(tmp))
        for name in names:
            params = {**(TINY[name] if args.tiny else {}), **overrides.get(name, {})}
            workload = build_workload(name, params, args.pods, args.seed)
            if args.kv_capacity_tokens:
                workload.kv_capacity_tokens = args.kv_capacity_tokens
                workload.description += f" KV cache set to {args.kv_capacity_tokens} tokens per pod."
            if args.closed_loop:
                workload.mode, workload.concurrency = "closed", args.closed_loop
                workload.description += f" Closed loop: {args.closed_loop} concurrent users, arrival times ignored."
            by_rid = {r.rid: r for r in workload.requests()}
            rows, runs = [], []
            for strategy, routing in strategies:
                records, wall, engine_hits, notes = run_strategy(workload, strategy, routing, args, tmp)
                row = summarize(strategy, records, by_rid, wall, engine_hits,
                                workload.params.get("token_scale", 1.0)) | notes
                rows.append(row)
                runs.append((strategy, records))
                for line in notes["crashed"]:
                    print(f"{name:>17} {strategy:<23} CRASHED {line}", flush=True)
                print(f"{name:>17} {strategy:<23} ok {row['ok']:>5} errors {row['errors']:>3}  TTFT p90 "
                      f"{row['ttft_p90']:8.3f} s  hit {row['hit_ratio'] * 100:5.1f} % (bound "
                      f"{row['upper_bound'] * 100:5.1f} %)  wall {wall:5.1f} s", flush=True)
            sections.append(report.workload_section(workload, rows, runs, out_dir))
            summary["workloads"][name] = {"params": workload.params, "kv_capacity_tokens": workload.kv_capacity_tokens,
                                          "sim_args": workload.sim_args, "rows": rows}
    elapsed = time.monotonic() - started
    load_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    version = subprocess.run([GATEWAY_BIN, "--version"], capture_output=True, text=True).stdout.strip()
    command = args.command or "loadtest/bench/quality.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    header = [
        "# prefixgate routing quality report", "",
        f"Command: `{command}`", "",
        f"{args.pods} simulated engine pods (`prefixgate-engine-sim`) per strategy, started fresh (cold caches) for "
        f"every strategy and workload; prefixgate with `threads: {args.gateway_threads}`, `log_level: warn` and its "
        f"default prefix-cache settings. Strategies: {', '.join(s for s, _ in strategies)} "
        "(`prefix-cache-standalone` = `routing.blend.load_balance_weight: 0`).", "",
        f"**Time**: the pods run with `--time-scale {args.time_scale:g}` and every latency and rate here is in "
        f"**simulated seconds** (wall-clock / {args.time_scale:g}). The client, the gateway and the pods shared "
        f"the machine (2 cores). Load before: {load}; after: {load_after}. Wall time of the whole run: "
        f"{elapsed:.0f} s. Gateway: `{version}`.", "",
        "**Columns**: req/s and output tok/s over the run (first send to last byte); TTFT = send to first content "
        "chunk; ITL = gaps between content chunks (chunks read together count as 0); token hit ratio = the engines' "
        "`usage.prompt_tokens_details.cached_tokens` / `prompt_tokens`; % of upper bound = hit ratio / the best "
        "possible (an infinite cache, every request on a pod holding its longest previously seen prefix, in "
        "16-token engine blocks); pod load = requests served per pod, max/mean.", "",
        "**Token scale**: each workload's token counts are multiplied by its `token_scale` k (prompts, outputs, KV "
        "capacity) and the simulator's rates are scaled to match (`--prefill-tokens-per-s` x k, "
        "`--decode-ms-per-token` and `--decode-ms-per-running-seq` / k), so every simulated duration and every "
        "capacity ratio equals the full-size workload's, with k times fewer tokens and SSE events for the client. "
        "The descriptions give full-size token counts, and output tok/s and ITL are per full-size token "
        "(measured output tokens / k, measured gaps x k).", "",
    ]
    path = report.write_report(out_dir, header, sections, summary)
    print(f"report: {path} ({elapsed:.0f} s)")
    return 0 if all(row["errors"] == 0 and not row["crashed"]
                    for w in summary["workloads"].values() for row in w["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
